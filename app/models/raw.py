"""OpenAI chat completions computed from an ``AsyncBaseLLM`` (the scripted and fallback raw API)."""

from __future__ import annotations

import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from agents.llms.base import AsyncBaseLLM, Usage
from app.models.encoded import ChunkEncoder


def _params(request: dict[str, Any]) -> dict[str, Any]:
    stop = request.get("stop")
    params: dict[str, Any] = {
        "max_new_tokens": request.get("max_completion_tokens") or request.get("max_tokens"),
        "temperature": request.get("temperature"),
        "top_p": request.get("top_p"),
    }
    if stop is not None:
        params["stop_words"] = [stop] if isinstance(stop, str) else list(stop)
    return {k: v for k, v in params.items() if v is not None}


def _messages(request: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for m in request.get("messages", []):
        content = m.get("content")
        if isinstance(content, list):  # content parts: keep the text ones
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        out.append({"role": m.get("role"), "content": content or ""})
    return out


class LLMRawBackend:
    """``RawChatBackend`` over an agent LLM (no tool calling, no logprobs)."""

    def __init__(self, llm: AsyncBaseLLM, model: str) -> None:
        self.llm = llm
        self.model = model

    async def _generate(self, request: dict[str, Any]) -> tuple[str, str, Usage]:
        text, finish, usage = "", "stop", Usage()
        async for delta in self.llm.astream(_messages(request), **_params(request)):
            text += delta.text
            if delta.finish_reason:
                finish = delta.finish_reason
            if delta.usage:
                usage = delta.usage
        return text, finish, usage

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """A whole ``chat.completion``."""
        choices, total = [], Usage()
        for i in range(int(request.get("n") or 1)):
            text, finish, usage = await self._generate(request)
            total.prompt_tokens = usage.prompt_tokens
            total.completion_tokens += usage.completion_tokens
            choices.append(
                {
                    "index": i,
                    "message": {"role": "assistant", "content": text},
                    "finish_reason": finish,
                    "logprobs": None,
                }
            )
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model,
            "choices": choices,
            "usage": total.to_dict(),
        }

    async def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """``chat.completion.chunk`` objects; a final usage chunk when asked for."""
        base = {
            "id": f"chatcmpl-{uuid.uuid4().hex}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": self.model,
        }
        # Chunks come pre-encoded: the constant head once per stream, then only the text is
        # escaped per token (json.dumps of every chunk was ~15 % of a busy streaming worker).
        enc = ChunkEncoder(base)
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        usage = Usage()
        for i in range(int(request.get("n") or 1)):
            yield enc.role(i)
            finish = "stop"
            async for delta in self.llm.astream(_messages(request), **_params(request)):
                if delta.text:
                    yield enc.content(i, delta.text)
                if delta.finish_reason:
                    finish = delta.finish_reason
                if delta.usage:
                    usage.prompt_tokens = delta.usage.prompt_tokens
                    usage.completion_tokens += delta.usage.completion_tokens
            yield enc.finish(i, finish)
        if include_usage:
            yield enc.usage(usage.to_dict())
