"""Runs: prepare a submission (the one admission path of a turn, for ``POST /messages`` and
for ``/v1/chat/completions`` with ``X-Session-Id``), read runs."""

from __future__ import annotations

from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Run
from app.errors import BadRequest, NotFound, Unavailable
from app.runtime.admission import Submission
from app.runtime.store import SessionNotFound, TurnLease
from app.schemas.sessions import RunCreate
from app.services.agent_directory import AgentInfo
from app.services.agent_refs import pinned_spec
from app.services.pages import check_limit, page
from app.services.sessions import get_session
from app.state import AppState

__all__ = ["SessionNotFound", "check_session_agent", "get_run", "list_runs", "prepare_submission"]


def check_session_agent(
    session_id: str, agent_id: str, agent_name: str, expected: AgentInfo | None
) -> None:
    """400 (naming ``X-Session-Id``) when a session belongs to another agent than the one the
    chat request names as its model (``expected``; None: any agent, as for REST)."""
    if expected is not None and agent_id != expected.id:
        raise BadRequest(
            f"session {session_id!r} belongs to agent {agent_name!r}", param="X-Session-Id"
        )


async def prepare_submission(
    state: AppState,
    lease: TurnLease,
    tenant_id: str,
    session_id: str,
    body: RunCreate,
    idempotency_key: str | None,
    *,
    agent: AgentInfo | None = None,
    source: str | None = None,
) -> Submission:
    """Look the session and its pinned spec up through the run store, on the turn's ``lease``
    (on PostgreSQL its connection goes on to the run's admission, ``RunManager.submit``).

    ``agent``: the agent the session must belong to (the chat endpoint's model); ``source``:
    the entry point, kept in the run's options (``openai``). 404 ``SessionNotFound`` for an
    unknown session; 429 ``budget_exceeded`` when the session's or tenant's budget is spent.
    """
    found = await state.run_manager.store.lookup(lease, tenant_id, session_id)
    row, spec = found.session, found.spec
    check_session_agent(session_id, row.agent_id, found.agent_name, agent)
    # With the tokens this replica counted while the tenant looked unlimited.
    figures = found.figures(state.tenant_usage.pending.get(tenant_id, 0))
    figures.preflight()  # 429 budget_exceeded when spent
    # Stored agents it names: their versions when the session started.
    spec = await pinned_spec(state.engine, state.sessionmaker, tenant_id, spec, row.created_at)
    for model in sorted(spec.model_names()):
        handle = state.models.get(model)
        if handle is None or not handle.ready:
            raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
    message = body.message if isinstance(body.message, str) else body.message.model_dump()
    options: dict[str, Any] = {
        "stream": body.stream,
        "on_disconnect": body.on_disconnect,
        "multitask_strategy": body.multitask_strategy,
    }
    if source is not None:
        options["source"] = source
    return Submission(
        tenant_id=tenant_id,
        session=row,
        agent_name=found.agent_name,
        spec=spec,
        message=message,
        strategy=(
            body.multitask_strategy
            if "multitask_strategy" in body.model_fields_set
            else spec.multitask_strategy or "reject"
        ),
        gen_params=body.gen_params.to_kwargs(),
        options=options,
        idempotency_key=idempotency_key,
        budget=figures,
        charge_later=partial(state.tenant_usage.charge, limited=False),
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
