"""Several OpenAI-compatible upstreams serving one model: which one a request goes to.

``UpstreamPool.order(key)`` lists the upstreams to try for one request, best first, by the
pool's ``routing``:

- ``session``: sticky sessions with bounded loads. Each request carries a *route key* (its
  session). A key seen for the first time is *placed*: on the first upstream, in rendezvous
  (highest random weight) hash order of the key, that holds fewer than
  ``ceil(load_factor × sessions / live upstreams)`` sessions ("consistent hashing with bounded
  loads", Mirrokni et al. 2016; ``sessions`` counts the one being placed). From then on every
  turn of the session goes to that upstream and finds its prompt prefix in its cache. The
  pool remembers the placements in an LRU map of at most ``max_sessions`` keys, forgetting one
  idle for ``session_idle_s``; a forgotten key is placed again (most often on the same upstream:
  its first choice in hash order, unless that one is full). ``load_factor`` (default 1.125)
  trades balance for hash order: with the ceiling, 16 sessions on 2 upstreams split 8/8 ± 1
  (1.25 would allow 10/6). When a session's upstream is out, the session is placed again among
  the live ones (only that upstream's sessions move); a session whose request failed over to
  another upstream moves to the one that answered. **A moved session stays** where it moved
  when its old upstream comes back: its latest prefix is cached on the new one, while the old
  one's copy is older, or gone if the server restarted. The returned upstream, holding fewer
  sessions, takes new ones first (the others are over the bound), so the load evens out as
  sessions come and go.
- ``least_loaded``: the upstream with the fewest requests in flight from this process.
- ``round_robin``: each in turn.

An upstream that fails (unreachable, 5xx, 429, a timeout) is taken out for a backoff that
doubles with each consecutive failure (``backoff_s`` … ``max_backoff_s``); afterwards the next
request that would go there tries it again, and a success puts it back for good. When every
upstream is out, the one due back first is tried. The route key of a request is the
``route_key`` context variable (the gateway sets it to the run's session), else a digest of the
conversation's first messages (``prefix_key``), which stays the same over a conversation's
turns when the whole history is sent each time. Placements are this process's view: the
gateway replicas in front of one fleet each keep their own (a session's requests reach one
replica: docs/deploy.md).
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import json
import logging
import math
import time
from collections import OrderedDict
from collections.abc import AsyncGenerator, AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

log = logging.getLogger(__name__)
ROUTINGS = ("session", "least_loaded", "round_robin")
T = TypeVar("T")

# The session (or any stable key) the current task's model calls belong to.
route_key: contextvars.ContextVar[str | None] = contextvars.ContextVar(
    "agents_llm_route_key", default=None
)


def prefix_key(messages: Iterable[Any], count: int = 2) -> str:
    """A digest of the first ``count`` messages: one conversation's turns share it."""
    head = list(itertools.islice(messages, count))
    text = json.dumps(head, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode(), digest_size=8).hexdigest()


@dataclass(eq=False)
class Upstream:
    """One upstream base URL and what this process knows of it."""

    url: str
    inflight: int = 0  # requests of this process in flight there
    failures: int = 0  # consecutive failures (0: healthy)
    down_until: float = 0.0  # taken out until then (monotonic seconds)
    requests: int = 0  # requests sent there (for tests and metrics)
    sessions: int = 0  # sessions placed there (``routing: session``) and not forgotten

    def weight(self, key: str) -> int:
        digest = hashlib.blake2b(f"{key}\0{self.url}".encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")


class UpstreamPool:
    """The upstreams of one model, a routing policy and each upstream's health."""

    def __init__(
        self,
        urls: Sequence[str],
        routing: str = "session",
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        clock: Callable[[], float] = time.monotonic,
        load_factor: float = 1.125,
        max_sessions: int = 100_000,
        session_idle_s: float = 1800.0,
    ) -> None:
        if not urls:
            raise ValueError("a model needs at least one upstream")
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate upstreams: {list(urls)}")
        if routing not in ROUTINGS:
            raise ValueError(f"unknown routing {routing!r}; expected one of {ROUTINGS}")
        if load_factor < 1.0:
            raise ValueError(f"load_factor must be at least 1, not {load_factor}")
        self.upstreams = [Upstream(u) for u in urls]
        self.routing = routing
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.load_factor = load_factor
        self.max_sessions = max_sessions
        self.session_idle_s = session_idle_s
        self._clock = clock
        self._turn = itertools.count()
        # route key -> (its upstream, last used): least recently used first.
        self._homes: OrderedDict[str, tuple[Upstream, float]] = OrderedDict()

    def order(self, key: str | None) -> list[Upstream]:
        """The upstreams to try for a request with route key ``key``, best first."""
        now = self._clock()
        live = [u for u in self.upstreams if u.down_until <= now]
        if not live:
            return [min(self.upstreams, key=lambda u: u.down_until)]
        if self.routing == "session" and key is not None:
            ranked = sorted(live, key=lambda u: u.weight(key), reverse=True)
            home = self._home(key, ranked, now)
            return [home] + [u for u in ranked if u is not home]
        if len(live) == 1:
            return live
        if self.routing == "least_loaded":
            start = next(self._turn) % len(live)  # ties go round robin
            rotated = live[start:] + live[:start]
            return sorted(rotated, key=lambda u: u.inflight)
        start = next(self._turn) % len(live)  # round_robin (and session without a key)
        return live[start:] + live[:start]

    def home(self, key: str) -> Upstream | None:
        """The upstream session ``key`` is placed on (None: not placed, or forgotten)."""
        placed = self._homes.get(key)
        return placed[0] if placed else None

    def _home(self, key: str, ranked: list[Upstream], now: float) -> Upstream:
        """Session ``key``'s upstream: where it was placed if that one is live, else a new
        placement: the first of ``ranked`` (the live upstreams in the key's hash order) below
        the bound."""
        self._forget_idle(now)
        placed = self._homes.get(key)
        if placed and placed[0] in ranked:
            self._homes[key] = (placed[0], now)
            self._homes.move_to_end(key)
            return placed[0]
        sessions = len(self._homes) + (0 if placed else 1)  # with this one
        bound = math.ceil(self.load_factor * sessions / len(ranked))
        # One is below the bound: the live ones hold at most sessions - 1 < bound × live.
        home = next((u for u in ranked if u.sessions < bound), ranked[0])
        self._place(key, home, now)
        return home

    def _place(self, key: str, upstream: Upstream, now: float) -> None:
        placed = self._homes.pop(key, None)
        if placed:
            placed[0].sessions -= 1
        self._homes[key] = (upstream, now)
        upstream.sessions += 1
        self._forget_idle(now)

    def _forget_idle(self, now: float) -> None:
        """Forget the least recently used sessions beyond ``max_sessions`` or idle too long."""
        while self._homes:
            key, (upstream, used) = next(iter(self._homes.items()))
            if len(self._homes) <= self.max_sessions and now - used < self.session_idle_s:
                return
            del self._homes[key]
            upstream.sessions -= 1

    def failed(self, upstream: Upstream) -> None:
        """Take ``upstream`` out; a failure while it is out already does not lengthen it."""
        now = self._clock()
        if upstream.down_until > now:
            return
        upstream.failures += 1
        wait = min(self.max_backoff_s, self.backoff_s * 2 ** (upstream.failures - 1))
        upstream.down_until = now + wait
        count = upstream.failures
        log.warning("upstream %s failed (%d in a row): out for %.1f s", upstream.url, count, wait)

    def succeeded(self, upstream: Upstream) -> None:
        """``upstream`` answered: healthy again."""
        if upstream.failures:
            log.warning("upstream %s is back", upstream.url)
        upstream.failures = 0
        upstream.down_until = 0.0

    async def stream(
        self,
        key: str | None,
        open_stream: Callable[[Upstream], AsyncIterator[T]],
        upstream_failed: Callable[[BaseException], bool],
    ) -> AsyncGenerator[T, None]:
        """The items of the first upstream (in ``order(key)``) whose stream answers: one that
        fails (``upstream_failed(exc)``) before its first item is taken out and the next one
        tried; a failure once items were yielded is raised (they cannot be taken back), as is
        an error that is not the upstream's."""
        error: BaseException | None = None
        for upstream in self.order(key):
            started = False
            upstream.inflight += 1
            upstream.requests += 1
            try:
                items = open_stream(upstream)
                async with contextlib.aclosing(items) as opened:  # type: ignore[type-var]
                    async for item in opened:
                        started = True
                        yield item
            except Exception as exc:
                if not upstream_failed(exc):
                    raise
                self.failed(upstream)
                if started:
                    raise
                error = exc
                continue
            finally:
                upstream.inflight -= 1
            self.succeeded(upstream)
            if error is not None and key is not None and self.routing == "session":
                self._place(key, upstream, self._clock())  # failed over: the session moves
            return
        assert error is not None
        raise error

    def status(self) -> dict[str, str]:
        """``url -> up | down`` (for logs and tests)."""
        now = self._clock()
        return {u.url: "down" if u.down_until > now else "up" for u in self.upstreams}
