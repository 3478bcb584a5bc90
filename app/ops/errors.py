"""Error helpers: the OpenAI envelope as a raw ASGI response.

Telling a database outage apart is ``app.errors.database_unavailable`` (the one classifier).
"""

from __future__ import annotations

import json
from collections.abc import Iterable

from starlette.types import Send


def error_body(message: str, type_: str, code: str, param: str | None = None) -> bytes:
    """Serialise ``{"error": {...}}`` the way the gateway's error handler does."""
    envelope = {"error": {"message": message, "type": type_, "param": param, "code": code}}
    return json.dumps(envelope, separators=(",", ":")).encode()


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
