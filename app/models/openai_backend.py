"""The ``openai`` backend: a remote OpenAI-compatible server (a vLLM fleet, any provider)."""

from __future__ import annotations

import json
import os
from collections.abc import AsyncIterator
from typing import Any

import httpx

from agents.llms.base import AsyncBaseLLM
from app.engines.base import EngineError, ModelHandle


class OpenAIRawBackend:
    """Forwards chat completion requests, renaming ``model`` to the upstream model."""

    def __init__(self, base_url: str, model: str, api_key: str | None, timeout_s: float) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.model = model
        self.client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"), headers=headers, timeout=timeout_s
        )

    def _body(self, request: dict[str, Any]) -> dict[str, Any]:
        return {**request, "model": self.model}

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST /chat/completions and return its JSON."""
        try:
            resp = await self.client.post("/chat/completions", json=self._body(request))
        except httpx.HTTPError as exc:
            raise EngineError(f"upstream model unreachable: {exc}") from exc
        if resp.status_code >= 400:
            raise EngineError(f"upstream error {resp.status_code}: {resp.text[:500]}")
        data: dict[str, Any] = resp.json()
        return data

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """Relay the upstream SSE chunks."""
        body = {**self._body(request), "stream": True}
        try:
            async with self.client.stream("POST", "/chat/completions", json=body) as resp:
                if resp.status_code >= 400:
                    text = (await resp.aread()).decode(errors="replace")
                    raise EngineError(f"upstream error {resp.status_code}: {text[:500]}")
                async for line in resp.aiter_lines():
                    if not line.startswith("data:"):
                        continue
                    data = line[5:].strip()
                    if data == "[DONE]":
                        return
                    yield json.loads(data)
        except httpx.HTTPError as exc:
            raise EngineError(f"upstream model unreachable: {exc}") from exc

    async def aclose(self) -> None:
        """Close the HTTP client."""
        await self.client.aclose()


class OpenAIHandle(ModelHandle):
    """A remote model: agent LLM via ``agents.llms.AsyncGPTAPI``, raw API via HTTP."""

    def __init__(self, name: str, llm: AsyncBaseLLM, raw: OpenAIRawBackend) -> None:
        super().__init__(name, "openai", llm, raw)
        self._raw = raw

    async def close(self) -> None:
        """Close the HTTP clients (raw API and agent LLM)."""
        await self._raw.aclose()
        aclose = getattr(self.llm, "aclose", None)
        if aclose is not None:
            await aclose()
        await super().close()


def create_openai_handle(config: dict[str, Any]) -> ModelHandle:
    """Build a handle from ``{"name", "base_url", "model", "api_key_env"}``."""
    from agents.llms.openai_compat import AsyncGPTAPI  # written by the llms teammate

    env = config.get("api_key_env")
    key = os.environ.get(str(env)) if env else None
    base_url = str(config.get("base_url") or "https://api.openai.com/v1")
    model = str(config.get("model") or config["name"])
    timeout = float(config.get("timeout_s", 600))
    llm = AsyncGPTAPI(model, key=key or "EMPTY", base_url=base_url, **config.get("gen_params", {}))
    return OpenAIHandle(config["name"], llm, OpenAIRawBackend(base_url, model, key, timeout))
