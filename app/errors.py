"""The error tree services raise, and the one handler that renders the OpenAI error envelope."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.routing import Match

from agents.llms.openai_client import APIConnectionError
from app.engines.base import EngineError
from app.ops.errors import error_envelope
from app.ops.logging import get_request_id

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
        self.headers = headers or {}

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

    def __init__(
        self,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            message, param=param, code=code, headers={"retry-after": "1", **(headers or {})}
        )


class DatabaseUnavailable(Unavailable):
    """503: the database cannot be reached (down, restarting, or every connection busy)."""

    code = "database_unavailable"

    def __init__(self) -> None:
        super().__init__("the database is unavailable; retry shortly", headers={"retry-after": "1"})


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
    if isinstance(exc, EngineError):
        kind = "invalid_request_error" if 400 <= exc.status < 500 else "server_error"
        envelope = error_envelope(exc.message, kind, exc.code, exc.param, get_request_id())
    else:
        if not isinstance(exc, AppError):
            exc = DatabaseUnavailable() if database_unavailable(exc) else internal_error()
        envelope = exc.body(get_request_id())
    error: dict[str, Any] = envelope["error"]
    return error


def _loc_to_param(loc: Sequence[int | str]) -> str | None:
    """``("body", "spec", "tools", 0, "name")`` -> ``spec.tools[0].name``."""
    parts = list(loc)
    if parts and parts[0] in {"body", "query", "path", "header", "cookie"}:
        parts = parts[1:]
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif not out:
            out = str(part)
        else:
            out += f".{part}"
    return out or None


def validation_error(exc: RequestValidationError) -> AppError:
    """The first validation error as a 422 (or 400 for unparsable JSON) naming the field."""
    errors = exc.errors()
    first = errors[0] if errors else {"loc": (), "msg": "invalid request", "type": "invalid"}
    param = _loc_to_param(first.get("loc", ()))
    if first.get("type") == "json_invalid":
        return BadRequest(f"invalid JSON body: {first.get('msg')}", code="invalid_json")
    if param is None and tuple(first.get("loc", ())) == ("body",):
        return BadRequest(
            "the request body must be a JSON object (send Content-Type: application/json)",
            code="invalid_body",
        )
    message = str(first.get("msg", "invalid value"))
    if param:
        message = f"{param}: {message}"
    code = "missing_field" if first.get("type") == "missing" else "invalid_value"
    return ValidationFailed(message, param=param, code=code)


def error_response(error: AppError) -> JSONResponse:
    """Render ``error`` as a JSON response."""
    return JSONResponse(error.body(), status_code=error.status, headers=error.headers)


def allowed_methods(request: Request) -> str:
    """Every method of the request's path, for a 405's ``Allow`` (Starlette's names only the
    first route of the path that matched: ``OPTIONS /v1/agents`` said ``POST``, not ``GET``)."""
    methods: set[str] = set()
    for route in request.app.router.routes:
        match, _ = route.matches(request.scope)
        if match is not Match.NONE:  # PARTIAL: the path matches, the method does not
            methods |= getattr(route, "methods", None) or set()
    return ", ".join(sorted(methods))


def install_error_handlers(app: FastAPI) -> None:
    """Register the one renderer for every error the app can raise."""

    async def app_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AppError)
        return error_response(exc)

    async def request_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        err = validation_error(exc)
        if request.url.path.endswith("/chat/completions"):
            err.status = 400  # what OpenAI answers (the SDK raises BadRequestError)
        return error_response(err)

    async def http_error(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, StarletteHTTPException)
        cls: type[AppError] = {401: Unauthorized, 404: NotFound, 413: PayloadTooLarge}.get(
            exc.status_code, BadRequest
        )
        err = cls(str(exc.detail), headers=dict(exc.headers or {}))
        err.status = exc.status_code
        if exc.status_code == 405:
            err.code = "method_not_allowed"
            err.headers["Allow"] = allowed_methods(request)
        return error_response(err)

    async def engine_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, EngineError)
        err = Unavailable(exc.message, code=exc.code, param=exc.param)
        err.status = exc.status
        if 400 <= exc.status < 500:  # the engine refused the request itself, not a failure
            err.type = "invalid_request_error"
            err.headers.pop("retry-after", None)
        return error_response(err)

    async def upstream_unreachable(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, APIConnectionError)
        return error_response(upstream_unavailable(exc))

    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        if unstorable_text(exc):
            return error_response(
                BadRequest(
                    "the request holds text the database cannot store (a NUL character,"
                    " \\u0000); remove it",
                    code="invalid_value",
                )
            )
        if database_unavailable(exc):
            log.warning("database unavailable: %s: %s", type(exc).__name__, exc)
            return error_response(DatabaseUnavailable())
        log.exception("unhandled error", exc_info=exc)
        response = internal_error()
        return JSONResponse(response.body(get_request_id()), status_code=response.status)

    app.add_exception_handler(AppError, app_error)
    app.add_exception_handler(RequestValidationError, request_invalid)
    app.add_exception_handler(StarletteHTTPException, http_error)
    app.add_exception_handler(EngineError, engine_error)
    app.add_exception_handler(APIConnectionError, upstream_unreachable)
    # Database and network errors are answered here rather than by the catch-all (which
    # re-raises, so the server drops the connection): a restarting database is a 503.
    app.add_exception_handler(sqlalchemy.exc.SQLAlchemyError, unexpected)
    app.add_exception_handler(OSError, unexpected)
    app.add_exception_handler(Exception, unexpected)
