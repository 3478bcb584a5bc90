"""GPTAPI / AsyncGPTAPI: any OpenAI-compatible chat completions server, streamed over aiohttp.

Any ``base_url`` and model name (no name-prefix rules). Streams server-sent events; asks for
usage with ``stream_options.include_usage``; retries connect errors, 429 and 5xx with
exponential backoff (never after the first streamed byte); stopping early or cancelling
closes the HTTP request, so the server stops generating.

aiohttp, not httpx: at 32 concurrent requests to a local mock server aiohttp served several
times httpx 0.28's throughput here (``python -m bench.http_client``, figures in bench/README.md).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import weakref
from collections.abc import AsyncIterator
from typing import Any

import aiohttp

from agents.llms.base import AsyncBaseLLM, BaseLLM, LLMDelta, Messages, Usage
from agents.llms.templates import OPENAI_META, MetaTemplate, to_api_messages

DEFAULT_BASE_URL = "https://api.openai.com/v1"
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
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


class APIError(RuntimeError):
    """The server answered with an error (``status`` is None for errors inside a stream)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class APIConnectionError(APIError):
    """No usable answer after every retry (connection failures, 429s or 5xxs)."""


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
        root = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.url = api_base or f"{root}/chat/completions"
        keys = [key] if isinstance(key, str) else list(key or [])
        keys = [k for k in keys if k and k != "ENV"] or [os.environ.get("OPENAI_API_KEY", "")]
        self._keys = itertools.cycle(keys)
        self.retry = max(1, retry)  # lagent's meaning: attempts in all
        self.timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=timeout)
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.stream, self.include_usage, self.json_mode = stream, include_usage, json_mode
        self.org, self.max_connections = org, max_connections
        self.extra_body = dict(extra_body or {})
        self.extra_headers = dict(extra_headers or {})
        # aiohttp sessions belong to one event loop; the sync twin runs on per-thread loops.
        self._sessions = weakref.WeakKeyDictionary[
            asyncio.AbstractEventLoop, aiohttp.ClientSession
        ]()

    # -- request ------------------------------------------------------------------------------
    def request_body(self, messages: Messages, params: dict[str, Any]) -> dict[str, Any]:
        """The JSON body for one call (lagent gen_params mapped to OpenAI fields)."""
        body: dict[str, Any] = {
            "model": self.model_type,
            "messages": to_api_messages(messages, self.meta_template),
            "stream": self.stream,
        }
        if self.stream and self.include_usage:
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

    def _headers(self) -> dict[str, str]:
        headers = {"Content-Type": "application/json", **self.extra_headers}
        if key := next(self._keys):
            headers["Authorization"] = f"Bearer {key}"
        if self.org:
            headers["OpenAI-Organization"] = self.org
        return headers

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        session = self._sessions.get(loop)
        if session is None or session.closed:
            connector = aiohttp.TCPConnector(limit=self.max_connections)
            session = aiohttp.ClientSession(connector=connector, timeout=self.timeout)
            self._sessions[loop] = session
        return session

    async def aclose(self) -> None:
        """Close this event loop's HTTP connections."""
        with_loop = self._sessions.pop(asyncio.get_running_loop(), None)
        if with_loop is not None:
            await with_loop.close()

    async def __aenter__(self) -> _OpenAICompatCore:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _post(self, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """A 200 response with unread body, after at most ``retry`` attempts."""
        error: Exception | None = None
        for attempt in range(self.retry):
            delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
            try:
                resp = await self._session().post(self.url, json=body, headers=self._headers())
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                error = exc
            else:
                if resp.status == 200:
                    return resp
                text = await resp.text(errors="replace")
                resp.release()
                error = APIError(f"HTTP {resp.status} from {self.url}: {text[:500]}", resp.status)
                if resp.status not in RETRY_STATUSES:
                    raise error
                delay = _retry_after(resp, delay, self.max_backoff_s)
            if attempt + 1 < self.retry:
                await asyncio.sleep(delay)
        status = error.status if isinstance(error, APIError) else None
        raise APIConnectionError(
            f"{self.url} failed after {self.retry} attempts: {error!r}", status
        ) from error

    # -- response -----------------------------------------------------------------------------
    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        resp = await self._post(self.request_body(messages, params))
        finished = False
        try:
            if self.stream:
                async for delta in _read_stream(resp):
                    yield delta
            else:
                yield _read_completion(await resp.json())
            finished = True
        finally:
            # Closing (not releasing) a half-read response drops the connection: that is
            # how the server learns to stop generating.
            resp.release() if finished else resp.close()


def _retry_after(resp: aiohttp.ClientResponse, default: float, cap: float) -> float:
    try:
        return min(cap, max(0.0, float(resp.headers.get("Retry-After", ""))))
    except ValueError:
        return default


async def _sse_data(resp: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """The ``data`` of each server-sent event (multi-line data joined with newlines)."""
    buffer, data = b"", list[str]()
    async for chunk in resp.content.iter_any():
        *lines, buffer = (buffer + chunk).split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8").rstrip("\r")
            if not line:
                if data:
                    yield "\n".join(data)
                data = []
            elif line.startswith("data:"):
                data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


async def _read_stream(resp: aiohttp.ClientResponse) -> AsyncIterator[LLMDelta]:
    finish: str | None = None
    usage: Usage | None = None
    async for data in _sse_data(resp):
        if data.strip() == "[DONE]":
            break
        chunk = json.loads(data)
        if "error" in chunk:
            raise APIError(f"error in stream: {json.dumps(chunk['error'], ensure_ascii=False)}")
        if chunk.get("usage"):
            usage = _usage(chunk["usage"])
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            extra = {k: delta[k] for k in ("tool_calls", "reasoning_content") if delta.get(k)}
            if delta.get("content") or extra:
                yield LLMDelta(text=delta.get("content") or "", extra=extra)
            finish = choice.get("finish_reason") or finish
    yield LLMDelta(finish_reason=finish or "stop", usage=usage)


def _read_completion(data: dict[str, Any]) -> LLMDelta:
    if "error" in data:
        raise APIError(f"error: {json.dumps(data['error'], ensure_ascii=False)}")
    choice = (data.get("choices") or [{}])[0]
    message = choice.get("message") or {}
    extra = {k: message[k] for k in ("tool_calls", "reasoning_content") if message.get(k)}
    usage = _usage(data["usage"]) if data.get("usage") else None
    finish = choice.get("finish_reason") or "stop"
    return LLMDelta(
        text=message.get("content") or "", finish_reason=finish, usage=usage, extra=extra
    )


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
