"""Pure-ASGI request body limit: 413 with the OpenAI envelope (before or while the body streams)."""

from __future__ import annotations

from collections.abc import Awaitable

from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.errors import PayloadTooLarge
from app.ops.errors import send_error


class BodyLimitMiddleware:
    """Refuse request bodies over ``max_bytes``."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared, chunked = None, False
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit():
                declared = int(value)
            elif name == b"transfer-encoding":
                chunked = True
        if declared is not None and declared > self.max_bytes:
            await self._reject(send)
            return
        if declared is not None and not chunked:
            # The server delivers no more than the declared length: nothing to count.
            await self.app(scope, receive, send)
            return
        seen = 0
        started = False

        async def limited_receive() -> Message:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    # FastAPI re-raises HTTPExceptions from body parsing; the handler renders 413.
                    raise HTTPException(413, f"request body larger than {self.max_bytes} bytes")
            return message

        def tracking_send(message: Message) -> Awaitable[None]:
            # Plain function: body messages pass straight through without a coroutine frame.
            nonlocal started
            started = started or message["type"] == "http.response.start"
            return send(message)

        try:
            await self.app(scope, limited_receive, tracking_send)
        except HTTPException as exc:
            if exc.status_code != 413 or started:
                raise
            await self._reject(send)

    async def _reject(self, send: Send) -> None:
        import json

        err = PayloadTooLarge(f"request body larger than {self.max_bytes} bytes")
        await send_error(send, 413, json.dumps(err.body()).encode())
