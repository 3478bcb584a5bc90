"""Runs: read them; the session cache of turns (a turn itself: app/services/turns.py)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.cache import TURN_SESSIONS, TTLCache
from app.db.models import Run
from app.errors import BadRequest, NotFound
from app.runtime.store import Found
from app.services.agent_directory import AgentInfo
from app.services.pages import check_limit, page
from app.services.sessions import get_session

__all__ = ["check_session_agent", "get_run", "list_runs", "session_cache"]


def check_session_agent(
    session_id: str, agent_id: str, agent_name: str, expected: AgentInfo | None
) -> None:
    """400 (naming ``X-Session-Id``) when a session belongs to another agent than the one the
    chat request names as its model (``expected``; None: any agent, as for REST)."""
    if expected is not None and agent_id != expected.id:
        raise BadRequest(
            f"session {session_id!r} belongs to agent {agent_name!r}", param="X-Session-Id"
        )


def session_cache(ttl_s: float, max_sessions: int = 10_000) -> TTLCache[tuple[str, str], Found]:
    """Sessions looked up for turns (``AppState.turn_sessions``), see
    ``app.services.turns._look_up``."""
    return TTLCache(TURN_SESSIONS, ttl_s, max_sessions)


async def get_run(db: AsyncSession, tenant_id: str, run_id: str) -> Run:
    """The tenant's run (404 otherwise)."""
    run = await db.get(Run, run_id)
    if run is None or run.tenant_id != tenant_id:
        raise NotFound(f"run {run_id!r} not found", param="run_id")
    return run


async def list_runs(
    db: AsyncSession, tenant_id: str, session_id: str, limit: int, after: str | None
) -> tuple[list[Run], bool]:
    """A page of a session's runs, newest first."""
    check_limit(limit)
    row, _ = await get_session(db, tenant_id, session_id)
    cursor = None
    if after is not None:
        cur = await get_run(db, tenant_id, after)
        cursor = (cur.created_at, cur.id)
    stmt = sa.select(Run).where(Run.session_pk == row.pk)
    return await page(db, stmt, Run.created_at, Run.id, limit, cursor)
