"""Several OpenAI-compatible upstreams serving one model: which one a request goes to.

``UpstreamPool.order(key)`` lists the upstreams to try for one request, best first, by the
pool's ``routing``:

- ``session``: rendezvous (highest random weight) hashing of the request's *route key* (its
  session) over the upstreams, so every turn of a session goes to the same engine and finds its
  prompt prefix in that engine's cache; when an upstream is taken out only its sessions move
  (each to its next-highest upstream), and they come back when it does.
- ``least_loaded``: the upstream with the fewest requests in flight from this process.
- ``round_robin``: each in turn.

An upstream that fails (unreachable, 5xx, 429, a timeout) is taken out for a backoff that
doubles with each consecutive failure (``backoff_s`` … ``max_backoff_s``); afterwards the next
request that would go there tries it again, and a success puts it back for good. When every
upstream is out, the one due back first is tried. The route key of a request is the
``route_key`` context variable (the gateway sets it to the run's session), else a digest of the
conversation's first messages (``prefix_key``), which stays the same over a conversation's
turns when the whole history is sent each time.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import itertools
import json
import logging
import time
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
    ) -> None:
        if not urls:
            raise ValueError("a model needs at least one upstream")
        if len(set(urls)) != len(urls):
            raise ValueError(f"duplicate upstreams: {list(urls)}")
        if routing not in ROUTINGS:
            raise ValueError(f"unknown routing {routing!r}; expected one of {ROUTINGS}")
        self.upstreams = [Upstream(u) for u in urls]
        self.routing = routing
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self._clock = clock
        self._turn = itertools.count()

    def order(self, key: str | None) -> list[Upstream]:
        """The upstreams to try for a request with route key ``key``, best first."""
        now = self._clock()
        live = [u for u in self.upstreams if u.down_until <= now]
        if not live:
            return [min(self.upstreams, key=lambda u: u.down_until)]
        if len(live) == 1:
            return live
        if self.routing == "session" and key is not None:
            return sorted(live, key=lambda u: u.weight(key), reverse=True)
        if self.routing == "least_loaded":
            start = next(self._turn) % len(live)  # ties go round robin
            rotated = live[start:] + live[:start]
            return sorted(rotated, key=lambda u: u.inflight)
        start = next(self._turn) % len(live)  # round_robin (and session without a key)
        return live[start:] + live[:start]

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
            return
        assert error is not None
        raise error

    def status(self) -> dict[str, str]:
        """``url -> up | down`` (for logs and tests)."""
        now = self._clock()
        return {u.url: "down" if u.down_until > now else "up" for u in self.upstreams}
