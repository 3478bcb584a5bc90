"""An httpx transport that drives an ASGI app in process and streams its response body.

httpx's own ``ASGITransport`` awaits the app until the response is complete and only then
hands the client the body: a "time to first token" measured through it is the time to the
whole answer. This one runs the app in a task and gives the client each body chunk as the app
sends it, so an in-process TTFT is the time to the first token's frame.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import httpx


class _Body(httpx.AsyncByteStream):
    def __init__(self, chunks: asyncio.Queue[bytes | None], app: asyncio.Task[None]) -> None:
        self.chunks, self.app = chunks, app
        self.gone = asyncio.Event()  # the client closed the response: the app sees a disconnect

    async def __aiter__(self) -> AsyncIterator[bytes]:
        while (chunk := await self.chunks.get()) is not None:
            yield chunk

    async def aclose(self) -> None:
        self.gone.set()
        with contextlib.suppress(asyncio.CancelledError):
            await self.app


class StreamingASGITransport(httpx.AsyncBaseTransport):
    """``httpx.AsyncClient(transport=StreamingASGITransport(app), base_url="http://t")``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        assert isinstance(request.stream, httpx.AsyncByteStream)
        body = b"".join([part async for part in request.stream])
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": request.method,
            "headers": [(k.lower(), v) for (k, v) in request.headers.raw],
            "scheme": request.url.scheme,
            "path": request.url.path,
            "raw_path": request.url.raw_path.split(b"?")[0],
            "query_string": request.url.query,
            "server": (request.url.host, request.url.port),
            "client": ("127.0.0.1", 123),
            "root_path": "",
        }
        loop = asyncio.get_running_loop()
        started: asyncio.Future[tuple[int, list[tuple[bytes, bytes]]]] = loop.create_future()
        chunks: asyncio.Queue[bytes | None] = asyncio.Queue()
        sent = False
        stream: _Body | None = None

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            assert stream is not None
            await stream.gone.wait()
            return {"type": "http.disconnect"}

        async def send(message: dict[str, Any]) -> None:
            if message["type"] == "http.response.start":
                started.set_result((message["status"], list(message.get("headers", []))))
            elif message["type"] == "http.response.body":
                if message.get("body"):
                    chunks.put_nowait(message["body"])
                if not message.get("more_body", False):
                    chunks.put_nowait(None)

        async def run() -> None:
            try:
                await self.app(scope, receive, send)
            except BaseException as exc:
                if not started.done():
                    started.set_exception(exc)
                raise
            finally:
                chunks.put_nowait(None)

        task = loop.create_task(run())
        stream = _Body(chunks, task)
        status, headers = await started
        return httpx.Response(status, headers=headers, stream=stream)
