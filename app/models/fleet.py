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


def _upstream_failed(exc: BaseException) -> bool:
    # An EngineError but ``upstream_error`` (the caller's own request refused) is the upstream's.
    return isinstance(exc, EngineError) and exc.code != "upstream_error"


class FleetRawBackend:
    """``RawChatBackend`` over one ``OpenAIRawBackend`` per upstream."""

    def __init__(self, pool: UpstreamPool, backends: dict[str, ClosableRaw]) -> None:
        self.pool = pool
        self.backends = backends

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """A whole ``chat.completion`` from the first upstream that answers."""

        async def answer(upstream: Upstream) -> AsyncIterator[dict[str, Any]]:
            yield await self.backends[upstream.url].complete(request)

        answers = self.pool.stream(request_key(request), answer, _upstream_failed)
        async with contextlib.aclosing(answers):
            async for whole in answers:
                return whole
        raise AssertionError("the pool ends with an answer or an error")  # pragma: no cover

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The chunks of the first upstream that starts answering."""
        chunks = self.pool.stream(
            request_key(request),
            lambda upstream: self.backends[upstream.url].stream(request),
            _upstream_failed,
        )
        async with contextlib.aclosing(chunks):
            async for chunk in chunks:
                yield chunk

    async def aclose(self) -> None:
        """Close every upstream's HTTP session."""
        for backend in self.backends.values():
            await backend.aclose()
