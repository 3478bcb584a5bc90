"""GPTAPI / AsyncGPTAPI: lagent's OpenAI-compatible model, for any base_url and model name.

No model-name rules: ``AsyncGPTAPI('my-org/any-model', base_url='http://host:8000/v1')``.
lagent's ``gen_params`` map to OpenAI fields (``max_new_tokens`` → ``max_tokens``,
``stop_words`` → ``stop``); messages map roles through the meta template (lagent's
``environment`` becomes ``system``). Streaming asks for usage (``stream_options``); the
transport (retries, backoff, timeouts, cancellation) is ``OpenAIClient``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, AsyncIterator
from typing import Any

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Messages, Usage
from agents.llms.openai_client import APIConnectionError, APIError, OpenAIClient
from agents.llms.templates import OPENAI_META, MetaTemplate, to_api_messages

__all__ = ["GPTAPI", "APIConnectionError", "APIError", "AsyncGPTAPI", "OpenAIClient"]

# Request fields passed through as given; gen_params the API does not know (top_k,
# repetition_penalty, a caller's session_id …) are dropped: OpenAI rejects unknown fields.
# Servers that take more (vLLM: top_k, repetition_penalty) get them through ``extra_body``.
PASSTHROUGH = frozenset(
    {
        "temperature", "top_p", "seed", "presence_penalty", "frequency_penalty", "logit_bias",
        "response_format", "tools", "tool_choice", "parallel_tool_calls", "user", "logprobs",
        "top_logprobs", "max_completion_tokens", "reasoning_effort", "max_tokens",
    }
)  # fmt: skip
_EXTRA_FIELDS = ("tool_calls", "reasoning_content")


class _OpenAICompatCore(AsyncBaseLLM):
    def __init__(
        self,
        model_type: str = "gpt-4o-mini",
        key: str | list[str] | None = None,
        api_base: str | None = None,
        *,
        base_url: str | None = None,
        retry: int = 3,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        stream: bool = True,
        include_usage: bool = True,
        json_mode: bool = False,
        org: str | None = None,
        extra_body: dict[str, Any] | None = None,
        extra_headers: dict[str, str] | None = None,
        max_connections: int = 100,
        meta_template: MetaTemplate | None = None,
        **gen_params: Any,
    ) -> None:
        super().__init__(path=model_type, meta_template=meta_template or OPENAI_META, **gen_params)
        self.model_type = model_type
        self.client = OpenAIClient(
            base_url, key, url=api_base, retry=retry, timeout=timeout,
            connect_timeout=connect_timeout, backoff_s=backoff_s, max_backoff_s=max_backoff_s,
            org=org, extra_headers=extra_headers, max_connections=max_connections,
        )  # fmt: skip
        self.streaming, self.include_usage, self.json_mode = stream, include_usage, json_mode
        self.extra_body = dict(extra_body or {})

    def request_body(self, messages: Messages, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON body for one call (lagent gen_params mapped to OpenAI fields)."""
        body: dict[str, Any] = {
            "model": self.model_type,
            "messages": to_api_messages(messages, self.meta_template),
        }
        if self.streaming and self.include_usage:
            body["stream_options"] = {"include_usage": True}
        if params.get("max_new_tokens") is not None:
            body["max_tokens"] = params["max_new_tokens"]
        if params.get("stop_words"):
            body["stop"] = list(params["stop_words"])[:4]  # OpenAI's limit; all apply locally
        body.update({k: v for k, v in params.items() if k in PASSTHROUGH and v is not None})
        if self.json_mode:
            body["response_format"] = {"type": "json_object"}
        body.update(self.extra_body)
        return body

    def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        return self._astream_on(self.client, messages, params)  # no extra generator per delta

    async def _astream_on(
        self, client: OpenAIClient, messages: Messages, params: dict[str, Any]
    ) -> AsyncGenerator[LLMDelta, None]:
        """One call on ``client`` (``FleetGPTAPI`` picks one of several)."""
        body = self.request_body(messages, params)
        if not self.streaming:
            yield _completion_delta(await client.complete(body))
            return
        finish: str | None = None
        usage: Usage | None = None
        # aclosing: stopping this generator must close the HTTP stream now, not at GC.
        async with contextlib.aclosing(client.stream(body)) as chunks:
            async for chunk in chunks:
                if chunk.get("usage"):
                    usage = _usage(chunk["usage"])
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    extra = {k: delta[k] for k in _EXTRA_FIELDS if delta.get(k)}
                    if delta.get("content") or extra:
                        yield LLMDelta(text=delta.get("content") or "", extra=extra)
                    finish = choice.get("finish_reason") or finish
        yield LLMDelta(finish_reason=finish or "stop", usage=usage)

    async def aclose(self) -> None:
        """Close this event loop's HTTP connections."""
        await self.client.aclose()

    async def __aenter__(self) -> _OpenAICompatCore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


def _completion_delta(data: dict[str, Any]) -> LLMDelta:
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    extra = {k: message[k] for k in _EXTRA_FIELDS if message.get(k)}
    usage = _usage(data["usage"]) if data.get("usage") else None
    finish = choice.get("finish_reason") or "stop"
    text = message.get("content") or ""
    return LLMDelta(text=text, finish_reason=finish, usage=usage, extra=extra)


def _usage(data: dict[str, Any]) -> Usage:
    return Usage(int(data.get("prompt_tokens") or 0), int(data.get("completion_tokens") or 0))


class AsyncGPTAPI(_OpenAICompatCore):
    """Async OpenAI-compatible model: ``AsyncGPTAPI('my-model', base_url='http://host/v1')``."""


class GPTAPI(_OpenAICompatCore, BaseLLM):
    """Sync OpenAI-compatible model (lagent's ``GPTAPI``): ``chat`` / ``stream_chat``."""

    def close(self) -> None:
        """Close the HTTP connections of the calling thread's loop."""
        from agents.utils import run_sync

        run_sync(self.aclose())
