"""The raw chat API of a model served by several upstreams (the ``openai`` backend's fleet).

``FleetRawBackend`` sends each request to the upstream its ``UpstreamPool`` picks
(``agents.llms.upstreams``), keyed by the request's route key: the ``route_key`` context
variable, else the request's ``user`` field, else a digest of its first messages (one
conversation's requests share it). An upstream that fails (unreachable, 5xx, 429, a timeout)
before answering is taken out with backoff and the request goes to the next; a refusal of the
caller's request (``upstream_error``) is passed on as it is.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any, Protocol

from agents.llms.upstreams import Upstream, UpstreamPool, prefix_key, route_key
from app.engines.base import EngineError, RawChatBackend


class ClosableRaw(RawChatBackend, Protocol):
    """One upstream's raw API (``OpenAIRawBackend``)."""

    async def aclose(self) -> None:
        """Close its HTTP session."""
        ...


def request_key(request: dict[str, Any]) -> str:
    """The route key of a raw request."""
    key = route_key.get()
    if key:
        return key
    user = request.get("user")
    if isinstance(user, str) and user:
        return "user:" + user
    return prefix_key(request.get("messages") or ())


def _upstream_failed(exc: EngineError) -> bool:
    return exc.code != "upstream_error"  # the caller's own request was refused otherwise


class FleetRawBackend:
    """``RawChatBackend`` over one ``OpenAIRawBackend`` per upstream."""

    def __init__(self, pool: UpstreamPool, backends: dict[str, ClosableRaw]) -> None:
        self.pool = pool
        self.backends = backends

    def _order(self, request: dict[str, Any]) -> list[Upstream]:
        return self.pool.order(request_key(request))

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """A whole ``chat.completion`` from the first upstream that answers."""
        error: EngineError | None = None
        for upstream in self._order(request):
            upstream.inflight += 1
            upstream.requests += 1
            try:
                answer = await self.backends[upstream.url].complete(request)
            except EngineError as exc:
                if not _upstream_failed(exc):
                    raise
                self.pool.failed(upstream)
                error = exc
                continue
            finally:
                upstream.inflight -= 1
            self.pool.succeeded(upstream)
            return answer
        assert error is not None
        raise error

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The chunks of the first upstream that starts answering."""
        error: EngineError | None = None
        for upstream in self._order(request):
            started = False
            upstream.inflight += 1
            upstream.requests += 1
            try:
                chunks = self.backends[upstream.url].stream(request)
                async with contextlib.aclosing(chunks) as stream:  # type: ignore[type-var]
                    async for chunk in stream:
                        started = True
                        yield chunk
            except EngineError as exc:
                if not _upstream_failed(exc):
                    raise
                self.pool.failed(upstream)
                if started:
                    raise
                error = exc
                continue
            finally:
                upstream.inflight -= 1
            self.pool.succeeded(upstream)
            return
        assert error is not None
        raise error

    async def aclose(self) -> None:
        """Close every upstream's HTTP session."""
        for backend in self.backends.values():
            await backend.aclose()
