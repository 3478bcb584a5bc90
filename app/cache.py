"""Small in-process caches with a time to live and a size bound (per replica, never shared).

Every cache registers under a kind ("auth", "agents", ...) so code that changes the cached data
in this process (an API call, the CLI run in-process by tests) can drop it at once with
``invalidate`` or ``invalidate_on_commit``; other replicas see the change when their entries
expire.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Hashable
from typing import Any, Generic, TypeVar

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncSession
from sqlalchemy.orm import Session

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

_LIVE: weakref.WeakSet[TTLCache[Any, Any]] = weakref.WeakSet()

# The sessions turns looked up (app.services.runs): dropped when a session or agent is deleted.
TURN_SESSIONS = "turn_sessions"


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
        self._loading: dict[K, asyncio.Task[V | None]] = {}  # reads in flight (``load``)
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
        """Forget ``key`` (and a read of it in flight: its result will not be cached)."""
        self._data.pop(key, None)
        self._loading.pop(key, None)

    def clear(self) -> None:
        """Forget everything."""
        self._data.clear()
        self._loading.clear()

    async def load(self, key: K, read: Callable[[], Awaitable[V | None]]) -> V | None:
        """The cached value of ``key``, else ``read()``'s (stored unless it is None).

        When an entry expires under load, every request in flight misses it at once: concurrent
        misses of one key share one ``read`` (a caller that is cancelled does not cancel it for
        the others). Dropping the key while it runs (``pop``, ``invalidate``) leaves its result
        uncached and makes later callers read anew, so a read that may predate a change is never
        served after it.
        """
        hit = self.get(key)
        if hit is not None:
            return hit
        if self.ttl_s <= 0:
            return await read()
        task = self._loading.get(key)
        if task is None:
            task = self._loading[key] = asyncio.ensure_future(self._read(key, read))
        return await asyncio.shield(task)

    async def _read(self, key: K, read: Callable[[], Awaitable[V | None]]) -> V | None:
        me = asyncio.current_task()
        try:
            value = await read()
            if value is not None and self._loading.get(key) is me:
                self.put(key, value)
            return value
        finally:
            if self._loading.get(key) is me:
                del self._loading[key]


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
