"""The app's exception handlers: every error an endpoint raises, rendered as the one envelope."""

from __future__ import annotations

import logging
from collections.abc import Sequence

import sqlalchemy.exc
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.responses import JSONResponse
from starlette.routing import Match

from agents.llms.openai_client import APIConnectionError
from app.engines.base import EngineError
from app.errors import (
    AppError,
    BadRequest,
    DatabaseUnavailable,
    NotFound,
    PayloadTooLarge,
    Unauthorized,
    Unavailable,
    ValidationFailed,
    database_unavailable,
    internal_error,
    unstorable_text,
    upstream_unavailable,
)
from app.ops.logging import get_request_id

log = logging.getLogger("app.errors")  # the logger these handlers always used


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


# OpenAI's own paths answer an invalid request with 400, not 422 (as chat completions).
_OPENAI_400 = ("/v1/responses", "/v1/conversations")


def install_error_handlers(app: FastAPI) -> None:
    """Register the one renderer for every error the app can raise."""

    async def app_error(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, AppError)
        return error_response(exc)

    async def request_invalid(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        err = validation_error(exc)
        path = request.url.path
        if path.endswith("/chat/completions") or path.startswith(_OPENAI_400):
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
