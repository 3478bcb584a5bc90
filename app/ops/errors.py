"""The OpenAI error envelope: its one builder (``error_envelope``), its encoding, and sending it
as a raw ASGI response.

Every error a client sees is built by ``error_envelope``: ``AppError.body`` (the exception
handlers, app/errors.py), ``public_error`` (a run's ``error``, an SSE ``error`` event, a chat
stream's error chunk), the budget's 429 and the rate limiter's 429 (raw ASGI, here). Telling a
database outage apart is ``app.errors.database_unavailable`` (the one classifier).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from starlette.types import Send


def error_envelope(
    message: str,
    type_: str,
    code: str,
    param: str | None = None,
    request_id: str | None = None,
) -> dict[str, Any]:
    """``{"error": {"message", "type", "param", "code"[, "request_id"]}}``."""
    error: dict[str, Any] = {"message": message, "type": type_, "param": param, "code": code}
    if request_id is not None:
        error["request_id"] = request_id
    return {"error": error}


def error_body(message: str, type_: str, code: str, param: str | None = None) -> bytes:
    """``error_envelope`` encoded the way the gateway's error handler writes it."""
    return json.dumps(error_envelope(message, type_, code, param), separators=(",", ":")).encode()


async def send_error(
    send: Send,
    status: int,
    body: bytes,
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> None:
    """Send a complete JSON error response on a raw ASGI ``send``."""
    raw_headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        *headers,
    ]
    await send({"type": "http.response.start", "status": status, "headers": raw_headers})
    await send({"type": "http.response.body", "body": body})
