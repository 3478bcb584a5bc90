"""FleetGPTAPI: one model served by several OpenAI-compatible upstreams (a vLLM fleet).

Each call goes to the upstream ``UpstreamPool`` picks (``agents.llms.upstreams``: by session,
least loaded or round robin); an upstream that fails before the reply's first token is taken
out with backoff and the call goes to the next one. A failure once the reply has started is
raised (its text cannot be taken back).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import aiohttp

from agents.llms.base import LLMDelta, Messages
from agents.llms.openai_client import RETRY_STATUSES, APIConnectionError, APIError, OpenAIClient
from agents.llms.openai_compat import AsyncGPTAPI
from agents.llms.upstreams import UpstreamPool, prefix_key, route_key


def upstream_failed(exc: BaseException) -> bool:
    """Whether ``exc`` says the upstream (not the request) failed: try another one."""
    if isinstance(exc, APIConnectionError | aiohttp.ClientError | TimeoutError):
        return True
    return isinstance(exc, APIError) and (exc.status is None or exc.status in RETRY_STATUSES)


class FleetGPTAPI(AsyncGPTAPI):
    """``AsyncGPTAPI`` over several base URLs: ``FleetGPTAPI(model, upstreams=[url, ...])``.

    Every other argument is ``AsyncGPTAPI``'s, the same for each upstream; ``retry`` is per
    upstream (default 1: a failure moves on to the next upstream at once).
    """

    def __init__(
        self,
        model_type: str,
        upstreams: Sequence[str],
        routing: str = "session",
        backoff_s: float = 1.0,
        max_backoff_s: float = 30.0,
        retry: int = 1,
        pool: UpstreamPool | None = None,
        **kwargs: Any,
    ) -> None:
        # ``pool``: shared with the model's raw API, so both know which upstreams are out.
        self.pool = pool or UpstreamPool(upstreams, routing, backoff_s, max_backoff_s)
        super().__init__(model_type, base_url=upstreams[0], retry=retry, **kwargs)
        self.clients: dict[str, OpenAIClient] = {upstreams[0]: self.client}
        for url in upstreams[1:]:
            self.clients[url] = AsyncGPTAPI(model_type, base_url=url, retry=retry, **kwargs).client

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        key = route_key.get() or prefix_key(messages)
        deltas = self.pool.stream(
            key,
            lambda upstream: self._astream_on(self.clients[upstream.url], messages, params),
            upstream_failed,
        )
        async with contextlib.aclosing(deltas):
            async for delta in deltas:
                yield delta

    async def aclose(self) -> None:
        """Close every upstream's connections (of this event loop)."""
        for client in self.clients.values():
            await client.aclose()
