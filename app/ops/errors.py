"""Error helpers: the OpenAI envelope as a raw ASGI response; telling database outages apart."""

from __future__ import annotations

import json
from collections.abc import Iterable

from sqlalchemy.exc import DBAPIError, InterfaceError, OperationalError
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


def is_database_unavailable(exc: BaseException) -> bool:
    """True for errors that mean "cannot reach the database", not "bad statement"."""
    from app.errors import database_unavailable

    if isinstance(exc, ConnectionError | TimeoutError):
        return True
    if isinstance(exc, DBAPIError) and (
        bool(exc.connection_invalidated)
        or isinstance(exc, OperationalError | InterfaceError)
        or isinstance(exc.orig, ConnectionError | TimeoutError)
    ):
        return True
    # The driver's own classes along the cause chain ("the database system is starting up",
    # "terminating connection due to administrator command", a pool timeout…).
    return database_unavailable(exc)
