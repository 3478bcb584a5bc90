"""The ``openai`` backend: a remote OpenAI-compatible server (a vLLM fleet, any provider)."""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agents.llms.base import AsyncBaseLLM
from agents.llms.openai_client import APIConnectionError, APIError, OpenAIClient, sse_data
from agents.llms.upstreams import ROUTINGS, UpstreamPool
from app.engines.base import EngineError, ModelHandle
from app.models.encoded import EncodedJSON
from app.models.fleet import ClosableRaw, FleetRawBackend

log = logging.getLogger(__name__)

# Upstream 4xx answers that mean "the gateway is misconfigured or the upstream is overloaded"
# (its key, its model name, its rate limit): the caller can do nothing about them, so they are
# the engine's 503. Any other 4xx refused the caller's request: it is passed on as that status.
_NOT_THE_CALLERS = frozenset({401, 403, 404, 407, 408, 409, 429})


def _engine_error(exc: Exception) -> EngineError:
    """The gateway's error for an upstream failure (docs/api.md: 503 ``engine_unavailable``)."""
    status = exc.status if isinstance(exc, APIError) else None
    if isinstance(exc, APIConnectionError) or status is None:
        log.warning("upstream model unreachable: %s", exc)  # its address stays here
        return EngineError("upstream model unreachable")
    if 400 <= status < 500 and status not in _NOT_THE_CALLERS:
        # The caller's own request was refused: the upstream's words (not its address) help.
        words = exc.detail if isinstance(exc, APIError) and exc.detail is not None else ""
        return EngineError(f"upstream model refused the request: {words}", status, "upstream_error")
    # The gateway's configuration or the upstream's state (its words may quote the gateway's
    # upstream key or model name): the log has them, the caller gets the status.
    log.warning("upstream error %s: %s", status, exc)
    return EngineError(f"upstream error {status}")


class OpenAIRawBackend:
    """Forwards chat completion requests, renaming ``model`` to the upstream model.

    One aiohttp session (``OpenAIClient``) per backend, no retries (the caller's SDK retries),
    and the upstream's JSON is passed through as bytes: the answer is parsed (ops count its
    usage) but never re-encoded.
    """

    def __init__(
        self,
        base_url: str,
        model: str,
        api_key: str | None,
        timeout_s: float,
        max_connections: int = 0,
    ) -> None:
        self.model = model
        self.client = OpenAIClient(
            base_url,
            # "EMPTY" as the agent LLM sends it: OpenAIClient would otherwise fall back to
            # $OPENAI_API_KEY, and that key must not go to an arbitrary base_url.
            api_key or "EMPTY",
            model=model,
            retry=1,
            timeout=timeout_s,
            connect_timeout=min(10.0, timeout_s),
            max_connections=max_connections,  # 0: no limit (aiohttp), like the forwarder
        )

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST /chat/completions; its JSON, carrying the upstream's bytes (``EncodedJSON``)."""
        try:
            resp = await self.client.post(request)
        except (APIError, aiohttp.ClientError, TimeoutError) as exc:
            raise _engine_error(exc) from exc
        try:
            raw = await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _engine_error(exc) from exc
        finally:
            resp.release()
        try:
            return EncodedJSON.parse(raw)
        except ValueError as exc:
            raise EngineError(f"upstream answered invalid JSON: {raw[:200]!r}") from exc

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Relay the upstream SSE chunks (``EncodedJSON``: each event's bytes, passed through)."""
        try:
            resp = await self.client.post({**request, "stream": True})
        except (APIError, aiohttp.ClientError, TimeoutError) as exc:
            raise _engine_error(exc) from exc
        finished = False
        try:
            async with contextlib.aclosing(sse_data(resp)) as events:
                async for data in events:
                    if data.strip() == "[DONE]":
                        break
                    # A multi-line event cannot be written back as one ``data:`` line.
                    chunk = EncodedJSON.parse(data.encode())
                    yield chunk if "\n" not in data else EncodedJSON(dict(chunk))
            finished = True
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise _engine_error(exc) from exc
        finally:
            # Closing (not releasing) a half-read response drops the connection, so the
            # upstream stops generating for a client that went away.
            resp.release() if finished else resp.close()

    async def aclose(self) -> None:
        """Close the HTTP session."""
        await self.client.aclose()


class OpenAIHandle(ModelHandle):
    """A remote model: agent LLM via ``agents.llms.AsyncGPTAPI``, raw API via HTTP."""

    def __init__(
        self, name: str, llm: AsyncBaseLLM, raw: ClosableRaw, pool: UpstreamPool | None = None
    ) -> None:
        super().__init__(name, "openai", llm, raw)
        self._raw = raw
        self.pool = pool  # several upstreams: their routing and health

    async def close(self) -> None:
        """Close the HTTP clients (raw API and agent LLM)."""
        await self._raw.aclose()
        aclose = getattr(self.llm, "aclose", None)
        if aclose is not None:
            await aclose()
        await super().close()


def _upstreams(config: dict[str, Any]) -> list[str] | None:
    """The entry's ``upstreams`` (several base URLs of one model), validated; None if absent."""
    urls = config.get("upstreams")
    if urls is None:
        return None
    if (
        not isinstance(urls, list)
        or not urls
        or not all(isinstance(u, str) and u.startswith(("http://", "https://")) for u in urls)
    ):
        raise ValueError("upstreams must be a non-empty list of http(s) base URLs")
    routing = config.get("routing", "session")
    if routing not in ROUTINGS:
        raise ValueError(f"routing must be one of {', '.join(ROUTINGS)}, not {routing!r}")
    for field, least in _POOL_FIELDS.items():
        value = config.get(field)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int | float) or value < least
        ):
            raise ValueError(f"{field} must be a number of at least {least}, not {value!r}")
    return [str(u).rstrip("/") for u in urls]


# A fleet's optional numbers (docs/engine.md) and their least values.
_POOL_FIELDS = {
    "upstream_backoff_s": 0,
    "upstream_max_backoff_s": 0,
    "routing_load_factor": 1,
    "routing_max_sessions": 1,
    "routing_session_idle_s": 0,
}


def create_openai_handle(config: dict[str, Any]) -> ModelHandle:
    """A handle from ``name``, ``base_url``, ``model``, ``api_key_env`` (+ optional ones below)."""
    # Optional: timeout_s (600), max_connections (raw API; 0 = unlimited), gen_params (agent LLM);
    # upstreams (several base URLs instead of base_url), routing (session | least_loaded |
    # round_robin), upstream_backoff_s (1), upstream_max_backoff_s (30), routing_load_factor
    # (1.125), routing_max_sessions (100000), routing_session_idle_s (1800): docs/engine.md.
    from agents.llms.fleet import FleetGPTAPI
    from agents.llms.openai_compat import AsyncGPTAPI  # written by the llms teammate

    env = config.get("api_key_env")
    key = os.environ.get(str(env)) if env else None
    base_url = str(config.get("base_url") or "https://api.openai.com/v1")
    model = str(config.get("model") or config["name"])
    timeout = float(config.get("timeout_s", 600))
    connections = int(config.get("max_connections", 0))
    gen_params = config.get("gen_params", {})
    urls = _upstreams(config)
    if urls is None:
        llm = AsyncGPTAPI(model, key=key or "EMPTY", base_url=base_url, **gen_params)
        raw = OpenAIRawBackend(base_url, model, key, timeout, connections)
        return OpenAIHandle(config["name"], llm, raw)
    routing = str(config.get("routing", "session"))
    backoff = float(config.get("upstream_backoff_s", 1.0))
    max_backoff = float(config.get("upstream_max_backoff_s", 30.0))
    pool = UpstreamPool(  # one view of health for both
        urls,
        routing,
        backoff,
        max_backoff,
        load_factor=float(config.get("routing_load_factor", 1.125)),
        max_sessions=int(config.get("routing_max_sessions", 100_000)),
        session_idle_s=float(config.get("routing_session_idle_s", 1800.0)),
    )
    fleet_llm = FleetGPTAPI(model, urls, pool=pool, key=key or "EMPTY", **gen_params)
    backends: dict[str, ClosableRaw] = {
        u: OpenAIRawBackend(u, model, key, timeout, connections) for u in urls
    }
    return OpenAIHandle(config["name"], fleet_llm, FleetRawBackend(pool, backends), pool)
