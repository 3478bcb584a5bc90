"""Runs: prepare a submission (the one admission path of a turn, for ``POST /messages`` and
for ``/v1/chat/completions`` with ``X-Session-Id``), read runs."""

from __future__ import annotations

from collections import OrderedDict
from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.db import raw
from app.db.base import transient
from app.db.models import Agent, AgentVersion, Run, Tenant
from app.db.models import Session as SessionRow
from app.errors import AppError, BadRequest, NotFound, Unavailable
from app.runtime import pgturn
from app.runtime.admission import Submission
from app.runtime.budgets import BudgetFigures, session_figures
from app.runtime.reads import reading
from app.schemas.agents import AgentSpec
from app.schemas.sessions import RunCreate
from app.services.agent_directory import AgentInfo
from app.services.agent_refs import pinned_spec
from app.services.pages import check_limit, page
from app.services.sessions import get_session
from app.state import AppState

# Agent versions never change once stored: their parsed specs are kept by (agent id, version).
_SPECS: OrderedDict[tuple[str, int], AgentSpec] = OrderedDict()
_SPECS_MAX = 1024


class SessionNotFound(NotFound):
    """404: the session of a turn does not exist (the chat endpoint then creates it)."""


def check_session_agent(
    session_id: str, agent_id: str, agent_name: str, expected: AgentInfo | None
) -> None:
    """400 (naming ``X-Session-Id``) when a session belongs to another agent than the one the
    chat request names as its model (``expected``; None: any agent, as for REST)."""
    if expected is not None and agent_id != expected.id:
        raise BadRequest(
            f"session {session_id!r} belongs to agent {agent_name!r}", param="X-Session-Id"
        )


def _spec(agent_id: str, version: int, raw: dict[str, Any]) -> AgentSpec:
    key = (agent_id, version)
    spec = _SPECS.get(key)
    if spec is None:
        spec = _SPECS[key] = AgentSpec.model_validate(raw)
        if len(_SPECS) > _SPECS_MAX:
            _SPECS.popitem(last=False)
    return spec


async def _lookup(
    db: AsyncSession, tenant_id: str, session_id: str
) -> tuple[SessionRow, str, AgentSpec, int | None, int]:
    """The session, its agent's name and pinned spec, and the tenant's budget: one query."""
    found = (
        await db.execute(
            sa.select(
                SessionRow, Agent.name, AgentVersion.spec, Tenant.token_budget, Tenant.tokens_used
            )
            .join(Agent, Agent.id == SessionRow.agent_id)
            .outerjoin(
                AgentVersion,
                (AgentVersion.agent_id == SessionRow.agent_id)
                & (AgentVersion.version == SessionRow.agent_version),
            )
            .outerjoin(Tenant, Tenant.id == SessionRow.tenant_id)
            .where(SessionRow.tenant_id == tenant_id, SessionRow.id == session_id)
        )
    ).first()
    if found is None:
        raise SessionNotFound(f"session {session_id!r} not found", param="id")
    row, name, raw_spec, budget, used = found
    if raw_spec is None:
        raise NotFound(f"agent version {row.agent_version} not found")
    return row, name, _spec(row.agent_id, row.agent_version, raw_spec), budget, int(used or 0)


async def prepare_submission(
    state: AppState,
    tenant_id: str,
    session_id: str,
    body: RunCreate,
    idempotency_key: str | None,
    *,
    agent: AgentInfo | None = None,
    source: str | None = None,
) -> Submission:
    """Look up the session and its pinned spec (a short DB session, not held while streaming).

    On PostgreSQL the lookup goes straight to the driver, and its pooled connection travels
    with the submission (``Submission.conn``): ``RunManager.submit`` admits the run on it.
    ``agent``: the agent the session must belong to (the chat endpoint's model); ``source``:
    the entry point, kept in the run's options (``openai``). 404 ``SessionNotFound`` for an
    unknown session; 429 ``budget_exceeded`` when the session's or tenant's budget is spent.
    """
    conn = None
    try:
        if state.engine.dialect.name == "postgresql" and not idempotency_key:
            conn = await state.engine.connect()
            pg = await raw.driver(conn)
            row, agent_name, spec, tenant_limit, tenant_used = await _lookup_pg(
                pg, tenant_id, session_id
            )
            check_session_agent(session_id, row.agent_id, agent_name, agent)
            if tenant_limit is not None:  # tokens this replica counted while it looked unlimited
                tenant_used += state.tenant_usage.pending.get(tenant_id, 0)
            limit = spec.budget.max_total_tokens if spec.budget is not None else None
            used = 0
            if limit is not None:
                used = int((await raw.fetchrow(pg, pgturn.SESSION_TOKENS, row.pk))[0])
            figures = BudgetFigures(limit, used, tenant_limit, tenant_used)
        else:
            async with reading(state.engine, state.sessionmaker) as db:
                row, agent_name, spec, tenant_limit, tenant_used = await _lookup(
                    db, tenant_id, session_id
                )
                check_session_agent(session_id, row.agent_id, agent_name, agent)
                if tenant_limit is not None:
                    tenant_used += state.tenant_usage.pending.get(tenant_id, 0)
                figures = await session_figures(db, row.pk, spec.budget, tenant_limit, tenant_used)
        figures.preflight()  # 429 budget_exceeded when spent
        # Stored agents it names: their versions when the session started.
        spec = await pinned_spec(state.engine, state.sessionmaker, tenant_id, spec, row.created_at)
        for model in sorted(spec.model_names()):
            handle = state.models.get(model)
            if handle is None or not handle.ready:
                raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
    except AppError:  # refused after its statements answered: the connection is fine
        if conn is not None:
            await conn.close()
        raise
    except BaseException:  # a statement failed or was cancelled: the connection may be busy
        if conn is not None:
            await raw.discard(conn)
        raise
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
        agent_name=agent_name,
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
        conn=conn,
    )


async def _lookup_pg(
    pg: Any, tenant_id: str, session_id: str
) -> tuple[SessionRow, str, AgentSpec, int | None, int]:
    """``_lookup`` in one statement sent to asyncpg (no ORM)."""
    found = await raw.fetchrow(pg, pgturn.LOOKUP, tenant_id, session_id)
    if found is None:
        raise SessionNotFound(f"session {session_id!r} not found", param="id")
    (pk, tenant, sid, agent_id, version, metadata, created, updated, rev) = found[:9]
    name, raw_spec, budget, used = found[9:]
    if raw_spec is None:
        raise NotFound(f"agent version {version} not found")
    row = transient(
        SessionRow,
        pk=pk,
        tenant_id=tenant,
        id=sid,
        agent_id=agent_id,
        agent_version=version,
        metadata_=metadata,
        created_at=created,
        updated_at=updated,
        memory_rev=rev,
    )
    return row, name, _spec(agent_id, version, raw_spec), budget, int(used or 0)


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
