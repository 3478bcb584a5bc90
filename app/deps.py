"""Dependencies, declared once as ``Annotated`` aliases, and their plain-function forms.

FastAPI solves each dependency, ``Header()`` and body per request (10-15 µs each on the
reference machine), so the hottest endpoint (``/v1/chat/completions``) calls the plain forms
(``app_state``, ``authenticate``, ``json_body``/``validated_body``) instead: the same code,
with the same errors, as the declared dependencies and a declared body.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Header, Request
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ValidationError
from sqlalchemy.ext.asyncio import AsyncSession
from starlette.exceptions import HTTPException

from app.runtime.runs import RunManager
from app.services.auth import Principal
from app.state import AppState


def app_state(request: Request) -> AppState:
    """The process resources (built by the lifespan)."""
    state: AppState = request.app.state.agentstation
    return state


async def get_state(request: Request) -> AppState:
    """The process resources."""
    # async: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop per call.
    return app_state(request)


StateDep = Annotated[AppState, Depends(get_state)]


async def get_db(state: StateDep) -> AsyncIterator[AsyncSession]:
    """One transaction per request, committed before the response is sent."""
    async with state.sessionmaker() as db, db.begin():
        yield db


DbDep = Annotated[AsyncSession, Depends(get_db, scope="function")]


async def principal_for(request: Request, authorization: str | None) -> Principal:
    """The caller's tenant (401 without a valid key, unless anonymous access is on)."""
    # Static keys and cached stored keys answer without opening a database session.
    state = app_state(request)
    return await state.auth.authenticate(state.sessionmaker, authorization)


async def get_principal(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The caller's tenant (401 without a valid key, unless anonymous access is on)."""
    return await principal_for(request, authorization)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def authenticate(request: Request) -> Principal:
    """``get_principal`` reading the header itself (the endpoint documents it in its
    ``openapi_extra``: ``AUTHORIZATION_PARAMETER``)."""
    return await principal_for(request, request.headers.get("authorization"))


# What FastAPI documents for ``get_principal``'s ``Header()``.
AUTHORIZATION_PARAMETER: dict[str, Any] = {
    "name": "authorization",
    "in": "header",
    "required": False,
    "schema": {"anyOf": [{"type": "string"}, {"type": "null"}], "title": "Authorization"},
}


async def get_runs(state: StateDep) -> RunManager:
    """The run manager."""
    return state.run_manager


RunsDep = Annotated[RunManager, Depends(get_runs)]


M = TypeVar("M", bound=BaseModel)


def _json_media_type(content_type: str | None) -> bool:
    """``application/json`` or ``application/*+json`` (parameters and case ignored)."""
    media = (content_type or "").partition(";")[0].strip().lower()
    main, _, sub = media.partition("/")
    return main == "application" and "/" not in sub and (sub == "json" or sub.endswith("+json"))


async def json_body(request: Request) -> Any:
    """The body as FastAPI reads a declared JSON body, before any dependency runs.

    ``None`` when empty and the raw bytes when not sent as JSON (``validated_body`` then answers
    "must be a JSON object"); unparsable JSON is a 400 ``invalid_json`` at once.
    """
    try:
        raw = await request.body()
        if not raw:
            return None
        if not _json_media_type(request.headers.get("content-type")):
            return raw
        return json.loads(raw)
    except json.JSONDecodeError as exc:
        error = {"type": "json_invalid", "loc": ("body", exc.pos), "msg": "JSON decode error"}
        raise RequestValidationError([{**error, "input": {}, "ctx": {"error": exc.msg}}]) from exc
    except HTTPException:  # 413 from the body limit
        raise
    except Exception as exc:  # e.g. bytes that are not UTF-8
        raise HTTPException(400, "There was an error parsing the body") from exc


def validated_body(model: type[M], data: Any) -> M:
    """``data`` (from ``json_body``) as ``model``; errors located in the body, as FastAPI does."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors(include_url=False)
        raise RequestValidationError([{**e, "loc": ("body", *e["loc"])} for e in errors]) from None
