"""OpenAIClient: HTTP to one OpenAI-compatible chat completions endpoint, over aiohttp.

Sends request bodies as given (optionally renaming ``model``) and returns the JSON answer or
the streamed ``chat.completion.chunk`` dicts. Retries connect errors, 408/409/429 and 5xx
with exponential backoff (honouring ``Retry-After``), never once a stream has started.
Leaving a stream early, or cancelling its task, closes the connection, so the server stops
generating. It fits the gateway's ``RawChatBackend`` (``complete`` / ``stream``).

aiohttp, not httpx: at 32 concurrent requests to a local mock server aiohttp served 7-13x
httpx 0.28's throughput here (``python -m bench.http_client``, bench/README.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import weakref
from collections.abc import AsyncGenerator
from typing import Any

import aiohttp
from yarl import URL

from agents.tracing import outgoing_headers

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_Loop = asyncio.AbstractEventLoop
RETRY_STATUSES = frozenset({408, 409, 429, 500, 502, 503, 504})
KEEPALIVE_S = 4.0  # below uvicorn's (and vLLM's server's) 5 s keep-alive


class APIError(RuntimeError):
    """The server answered with an error (``status`` is None for errors inside a stream)."""

    def __init__(self, message: str, status: int | None = None, detail: str | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.detail = detail  # the server's own words (its answer's body), without our URL


class APIConnectionError(APIError):
    """No usable answer after every attempt (connection failures, 429s or 5xxs)."""


class OpenAIClient:
    """One endpoint: ``base_url`` (``…/v1``) or the full ``url`` of ``/chat/completions``."""

    def __init__(
        self,
        base_url: str | None = None,
        key: str | list[str] | None = None,
        *,
        url: str | None = None,
        model: str | None = None,
        retry: int = 3,
        timeout: float = 120.0,
        connect_timeout: float = 10.0,
        backoff_s: float = 0.5,
        max_backoff_s: float = 8.0,
        org: str | None = None,
        extra_headers: dict[str, str] | None = None,
        max_connections: int = 100,
    ) -> None:
        root = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        self.url = url or f"{root}/chat/completions"
        self._url = URL(self.url)  # parsed once, not by aiohttp per request
        self.model = model
        # lagent's key="ENV" (or no key) means $OPENAI_API_KEY; a list of keys rotates.
        keys = [key] if isinstance(key, str) else list(key or [])
        keys = [k for k in keys if k and k != "ENV"] or [os.environ.get("OPENAI_API_KEY", "")]
        self._keys = itertools.cycle(keys)
        self._rotating = len(keys) > 1
        self.retry = max(1, retry)  # lagent's meaning: attempts in all
        self.timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=timeout)
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.headers = {"Content-Type": "application/json", **(extra_headers or {})}
        if org:
            self.headers["OpenAI-Organization"] = org
        self._fixed_headers = None if self._rotating else self._with_key(keys[0])
        self.max_connections = max_connections
        # aiohttp sessions belong to one event loop; sync callers run on per-thread loops.
        self._sessions = weakref.WeakKeyDictionary[_Loop, aiohttp.ClientSession]()
        self._last: tuple[_Loop, aiohttp.ClientSession] | None = None  # the common case

    def _session(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        last = self._last
        if last is not None and last[0] is loop and not last[1].closed:
            return last[1]
        session = self._sessions.get(loop)
        if session is None or session.closed:
            # Idle connections are dropped after 4 s, before the usual server closes them
            # (uvicorn's default, so vLLM's server: 5 s): reusing one the server is closing at
            # that moment is a "connection reset" that took a healthy upstream out of a fleet.
            connector = aiohttp.TCPConnector(
                limit=self.max_connections, keepalive_timeout=KEEPALIVE_S
            )
            # No cookie jar: one client serves every tenant, and an upstream's cookie must not
            # ride along on someone else's next request (nor cost a jar lookup per request).
            jar = aiohttp.DummyCookieJar()
            session = aiohttp.ClientSession(
                connector=connector, timeout=self.timeout, cookie_jar=jar
            )
            self._sessions[loop] = session
        self._last = (loop, session)
        return session

    async def aclose(self) -> None:
        """Close this event loop's connections."""
        loop = asyncio.get_running_loop()
        session = self._sessions.pop(loop, None)
        if self._last is not None and self._last[0] is loop:
            self._last = None
        if session is not None:
            await session.close()

    def _with_key(self, key: str) -> dict[str, str]:
        return {**self.headers, "Authorization": f"Bearer {key}"} if key else self.headers

    def _headers(self) -> dict[str, str]:
        if self._fixed_headers is not None:
            return self._fixed_headers
        return self._with_key(next(self._keys))

    async def post(self, body: dict[str, Any]) -> aiohttp.ClientResponse:
        """A 200 response, body unread, after at most ``retry`` attempts; else raise."""
        if self.model:
            body = {**body, "model": self.model}
        data = json.dumps(body).encode()  # once, not per attempt; headers say it is JSON
        error: Exception | None = None
        for attempt in range(self.retry):
            delay = min(self.max_backoff_s, self.backoff_s * 2**attempt)
            try:
                # The trace context goes upstream when tracing is on (agents/tracing.py).
                headers = outgoing_headers(self._headers())
                resp = await self._session().post(self._url, data=data, headers=headers)
            except (aiohttp.ClientConnectionError, TimeoutError) as exc:
                error = exc
            else:
                if resp.status == 200:
                    return resp
                text = await resp.text(errors="replace")
                resp.release()
                error = APIError(
                    f"HTTP {resp.status} from {self.url}: {text[:500]}", resp.status, text[:500]
                )
                if resp.status not in RETRY_STATUSES:
                    raise error
                delay = _retry_after(resp, delay, self.max_backoff_s)
            if attempt + 1 < self.retry:
                await asyncio.sleep(delay)
        status = error.status if isinstance(error, APIError) else None
        raise APIConnectionError(
            f"{self.url} failed after {self.retry} attempts: {error!r}", status
        ) from error

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """POST a non-streaming request; the ``chat.completion`` JSON."""
        resp = await self.post({**request, "stream": False})
        try:
            data: dict[str, Any] = await resp.json(content_type=None)
        finally:
            resp.release()
        if "error" in data:
            raise APIError(f"error: {json.dumps(data['error'], ensure_ascii=False)}")
        return data

    async def stream(self, request: dict[str, Any]) -> AsyncGenerator[dict[str, Any], None]:
        """POST a streaming request; yield its chunk dicts (no ``[DONE]``)."""
        resp = await self.post({**request, "stream": True})
        finished = False
        try:
            async with contextlib.aclosing(sse_data(resp)) as events:
                async for data in events:
                    if data.strip() == "[DONE]":
                        break
                    chunk: dict[str, Any] = json.loads(data)
                    if "error" in chunk:
                        message = json.dumps(chunk["error"], ensure_ascii=False)
                        raise APIError(f"error in stream: {message}")
                    yield chunk
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


async def sse_data(resp: aiohttp.ClientResponse) -> AsyncGenerator[str, None]:
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
