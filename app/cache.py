"""Small in-process caches with a time to live and a size bound (per replica, never shared).

Every cache registers under a kind ("auth", "agents", ...) so code that changes the cached data
in this process (an API call, the CLI run in-process by tests) can drop it at once with
``invalidate`` or ``invalidate_on_commit``; other replicas see the change when their entries
expire.
"""

from __future__ import annotations

import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any, Generic, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_LIVE: weakref.WeakSet[TTLCache[Any, Any]] = weakref.WeakSet()


class TTLCache(Generic[K, V]):
    """A map whose entries expire ``ttl_s`` after they were stored; least recently used go first.

    ``ttl_s <= 0`` disables it (every ``get`` misses). ``max_entries`` bounds its memory, so
    keys chosen by callers (e.g. unknown API keys) cannot grow it without limit.
    """

    def __init__(
        self,
        kind: str,
        ttl_s: float,
        max_entries: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.kind = kind
        self.ttl_s = ttl_s
        self.max_entries = max(1, max_entries)
        self.clock = clock
        self._data: OrderedDict[K, tuple[float, V]] = OrderedDict()
        _LIVE.add(self)

    def __len__(self) -> int:
        return len(self._data)

    def get(self, key: K) -> V | None:
        """The value stored for ``key`` if it has not expired, else None."""
        hit = self._data.get(key)
        if hit is None:
            return None
        if self.clock() >= hit[0]:
            del self._data[key]
            return None
        self._data.move_to_end(key)
        return hit[1]

    def put(self, key: K, value: V) -> None:
        """Store ``value`` for ``ttl_s`` (nothing when the cache is disabled)."""
        if self.ttl_s <= 0:
            return
        self._data[key] = (self.clock() + self.ttl_s, value)
        self._data.move_to_end(key)
        while len(self._data) > self.max_entries:
            self._data.popitem(last=False)

    def pop(self, key: K) -> None:
        """Forget ``key``."""
        self._data.pop(key, None)

    def clear(self) -> None:
        """Forget everything."""
        self._data.clear()


def invalidate(kind: str, key: object | None = None) -> None:
    """Drop ``key`` (or everything) from every live cache of ``kind`` in this process."""
    for cache in list(_LIVE):
        if cache.kind == kind:
            if key is None:
                cache.clear()
            else:
                cache.pop(key)


_PENDING = "app.cache.pending"


def invalidate_on_commit(db: AsyncSession, kind: str, key: object | None = None) -> None:
    """``invalidate`` now and again once ``db``'s transaction commits.

    Now: this process stops serving the old value. After the commit: a request that re-read the
    old row between now and the commit (it was not committed yet) does not keep it cached.
    """
    invalidate(kind, key)
    db.info.setdefault(_PENDING, set()).add((kind, key))


@event.listens_for(Session, "after_commit")
def _after_commit(session: Session) -> None:
    for kind, key in session.info.pop(_PENDING, ()):
        invalidate(kind, key)
