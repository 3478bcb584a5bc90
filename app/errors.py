"""The error tree services raise, and how an exception becomes a client-safe error (the app's
handlers that render it are in app/api/error_handlers.py)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any, ClassVar

import sqlalchemy.exc
from pydantic import BaseModel

from agents.llms.openai_client import APIConnectionError
from agents.parsers import OutputParseError
from app.engines.base import EngineError
from app.ops.errors import error_envelope
from app.ops.logging import get_request_id
from app.outbound import OutboundRefused

log = logging.getLogger(__name__)


class ErrorDetail(BaseModel):
    """What went wrong: a stable ``code``, a short message and the field to blame, if any."""

    message: str
    type: str
    param: str | None
    code: str


class ErrorEnvelope(BaseModel):
    """The OpenAI error envelope: the body of every error response (the OpenAPI document's
    ``ErrorEnvelope`` component)."""

    error: ErrorDetail


class AppError(Exception):
    """Base of every error a client sees; subclasses fix the status and type."""

    status = 500
    type = "server_error"
    code = "internal_error"
    default_headers: ClassVar[dict[str, str]] = {}  # the response's headers unless given

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.param = param
        if code is not None:
            self.code = code
        self.headers = {**self.default_headers, **(headers or {})}

    def body(self, request_id: str | None = None) -> dict[str, Any]:
        """The OpenAI error envelope (with the request id when given)."""
        return error_envelope(self.message, self.type, self.code, self.param, request_id)


class BadRequest(AppError):
    """400: malformed input."""

    status = 400
    type = "invalid_request_error"
    code = "invalid_request"


class ValidationFailed(AppError):
    """422: well-formed input naming something that does not exist or a bad value."""

    status = 422
    type = "invalid_request_error"
    code = "invalid_value"


class Unauthorized(AppError):
    """401: no key or an invalid key."""

    status = 401
    type = "authentication_error"
    code = "invalid_api_key"


class NotFound(AppError):
    """404: unknown object (or another tenant's)."""

    status = 404
    type = "invalid_request_error"
    code = "not_found"


class Conflict(AppError):
    """409: the object exists or is busy."""

    status = 409
    type = "invalid_request_error"
    code = "conflict"


class SessionBusy(Conflict):
    """409: the session is running another message and the strategy is ``reject``."""

    code = "session_busy"

    def __init__(self, session_id: str) -> None:
        super().__init__(
            f"session {session_id!r} is busy with another run",
            headers={"x-should-retry": "false"},
        )


class RunNotWaiting(Conflict):
    """409: a decision for a run that does not wait for approval (docs/approvals.md)."""

    code = "run_not_waiting"


class PayloadTooLarge(AppError):
    """413: body over MAX_BODY_BYTES."""

    status = 413
    type = "invalid_request_error"
    code = "payload_too_large"


class Unavailable(AppError):
    """503: the engine is not ready or overloaded (``retry-after: 1`` unless given)."""

    status = 503
    type = "server_error"
    code = "engine_unavailable"
    default_headers: ClassVar[dict[str, str]] = {"retry-after": "1"}


class DatabaseUnavailable(Unavailable):
    """503: the database cannot be reached (down, restarting, or every connection busy)."""

    code = "database_unavailable"

    def __init__(self) -> None:
        super().__init__("the database is unavailable; retry shortly")


def unstorable_text(exc: BaseException) -> bool:
    """True when PostgreSQL refused a string of the request (NUL bytes: text and jsonb can't
    hold them); SQLite stores them, so only the PostgreSQL driver's errors match."""
    import asyncpg.exceptions as pg

    refused = (pg.CharacterNotInRepertoireError, pg.UntranslatableCharacterError)
    return any(isinstance(e, refused) for e in _causes(exc))


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """``exc`` and what caused it, outermost first (cycles stop the walk)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def database_unavailable(exc: BaseException) -> bool:
    """True when ``exc`` (or what caused it) says the database is unreachable, not the query bad."""
    import asyncpg.exceptions as pg  # the PostgreSQL driver; SQLite errors never match these

    lost = (
        pg.PostgresConnectionError,  # the connection dropped mid-operation
        pg.OperatorInterventionError,  # shutting down, cannot connect now, admin shutdown
        pg.InterfaceError,  # the connection is closed
        pg.InternalClientError,  # a connection broken mid-operation
        sqlalchemy.exc.DisconnectionError,
        sqlalchemy.exc.TimeoutError,  # no pooled connection free in time
    )
    for current in _causes(exc):
        if isinstance(current, lost):
            return True
        if isinstance(current, OSError) and _raised_by_database(current):
            return True  # refused, reset, timed out while connecting or talking to it
        if isinstance(current, sqlalchemy.exc.DBAPIError) and current.connection_invalidated:
            return True
    return False


def _raised_by_database(exc: BaseException) -> bool:
    """True when the traceback passes through the database driver or SQLAlchemy (an OSError
    from a kernel or a file is not a database outage)."""
    tb = exc.__traceback__
    while tb is not None:
        module = str(tb.tb_frame.f_globals.get("__name__", ""))
        if module.startswith(("sqlalchemy.", "asyncpg.", "aiosqlite")):
            return True
        tb = tb.tb_next
    return False


def upstream_unavailable(exc: APIConnectionError) -> Unavailable:
    """An agent's remote model refused or timed out: the engine's 503, never the database's
    (its address and the driver's words stay in the log)."""
    log.warning("upstream model unreachable: %s", exc)
    return Unavailable("upstream model unreachable")


INTERNAL_MESSAGE = "internal server error; the server log has the details under request_id"


def internal_error() -> AppError:
    """What a client sees of a failure it did not cause: a fixed message and a stable code;
    the detail (exception, SQL, paths, tracebacks) is logged by the caller under the request
    id, which the body carries (``request_id``) as the ``x-request-id`` header does."""
    return AppError(INTERNAL_MESSAGE)


def public_error(exc: BaseException) -> dict[str, Any]:
    """The error object a client may see for ``exc`` (a run's ``error``, an SSE ``error``
    event, a chat stream's error chunk): errors written for clients (``AppError``,
    ``EngineError``) as they are; a database outage as ``database_unavailable``; anything else
    ``internal_error`` with a fixed message. Always with the request id."""
    if isinstance(exc, APIConnectionError):
        exc = upstream_unavailable(exc)
    if isinstance(exc, OutputParseError):  # the model's reply, shown its error once, failed again
        exc = AppError(str(exc), code="output_parse_error")
    if isinstance(exc, OutboundRefused):  # a remote agent's URL refused when connecting
        exc = ValidationFailed(str(exc), param="spec.remote", code="outbound_refused")
    if isinstance(exc, EngineError):
        kind = "invalid_request_error" if 400 <= exc.status < 500 else "server_error"
        envelope = error_envelope(exc.message, kind, exc.code, exc.param, get_request_id())
    else:
        if not isinstance(exc, AppError):
            exc = DatabaseUnavailable() if database_unavailable(exc) else internal_error()
        envelope = exc.body(get_request_id())
    error: dict[str, Any] = envelope["error"]
    return error
