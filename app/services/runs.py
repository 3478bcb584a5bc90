"""Runs: prepare a submission, read runs, cancel."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Run
from app.errors import NotFound, Unavailable
from app.ops.budget_store import preflight
from app.runtime.runs import Submission
from app.schemas.sessions import RunCreate
from app.services.agents import agent_spec
from app.services.pages import check_limit, page
from app.services.sessions import get_session
from app.state import AppState


async def prepare_submission(
    state: AppState, tenant_id: str, session_id: str, body: RunCreate, idempotency_key: str | None
) -> Submission:
    """Look up the session and its pinned spec (a short DB session, not held while streaming)."""
    async with state.sessionmaker() as db:
        row, agent = await get_session(db, tenant_id, session_id)
        spec = await agent_spec(db, agent.id, row.agent_version)
        await preflight(db, tenant_id, row.pk, spec.budget)  # 429 budget_exceeded when spent
    if spec.model is not None:
        handle = state.models.get(spec.model)
        if handle is None or not handle.ready:
            raise Unavailable(f"model {spec.model!r} is not ready", code="model_not_ready")
    message = body.message if isinstance(body.message, str) else body.message.model_dump()
    return Submission(
        tenant_id=tenant_id,
        session=row,
        agent_name=agent.name,
        spec=spec,
        message=message,
        strategy=body.multitask_strategy,
        gen_params=body.gen_params.to_kwargs(),
        options={
            "stream": body.stream,
            "on_disconnect": body.on_disconnect,
            "multitask_strategy": body.multitask_strategy,
        },
        idempotency_key=idempotency_key,
    )


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
