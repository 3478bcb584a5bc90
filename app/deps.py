"""Dependencies, declared once as ``Annotated`` aliases.

FastAPI solves each dependency and each declared ``Header()`` per request (about 10-15 µs each
on the reference machine), so the request-only forms below (``app_state``, ``authenticate``)
exist for the hot endpoints; they are the same code the documented dependencies run.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated, Any

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.runtime.runs import RunManager
from app.services.auth import Principal
from app.settings import Settings
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


async def get_settings_dep(state: StateDep) -> Settings:
    """The app's settings."""
    return state.settings


SettingsDep = Annotated[Settings, Depends(get_settings_dep)]


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
    """``get_principal`` reading the header itself: no ``Header()`` for FastAPI to solve.

    An endpoint depending on it lists ``AUTHORIZATION_PARAMETER`` in its ``openapi_extra``.
    """
    return await principal_for(request, request.headers.get("authorization"))


CallerDep = Annotated[Principal, Depends(authenticate)]

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
