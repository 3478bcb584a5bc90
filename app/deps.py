"""Dependencies, declared once as ``Annotated`` aliases."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy.ext.asyncio import AsyncSession

from app.runtime.runs import RunManager
from app.services.auth import Principal
from app.settings import Settings
from app.state import AppState


async def get_state(request: Request) -> AppState:
    """The process resources."""
    # async: FastAPI runs a plain ``def`` dependency in its thread pool, a thread hop per call.
    state: AppState = request.app.state.agentstation
    return state


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


async def get_principal(
    state: StateDep, authorization: Annotated[str | None, Header()] = None
) -> Principal:
    """The caller's tenant (401 without a valid key, unless anonymous access is on)."""
    # Static keys and cached stored keys answer without opening a database session.
    return await state.auth.authenticate(state.sessionmaker, authorization)


PrincipalDep = Annotated[Principal, Depends(get_principal)]


async def get_runs(state: StateDep) -> RunManager:
    """The run manager."""
    return state.run_manager


RunsDep = Annotated[RunManager, Depends(get_runs)]
