"""Runs: prepare a submission (the one admission path of a turn, for ``POST /messages`` and
for ``/v1/chat/completions`` with ``X-Session-Id``), read runs."""

from __future__ import annotations

from functools import partial
from typing import Any

import sqlalchemy as sa
from sqlalchemy.event import listen
from sqlalchemy.ext.asyncio import AsyncSession

from app.cache import TURN_SESSIONS, TTLCache
from app.db.models import Agent, Run
from app.db.models import Session as SessionRow
from app.errors import BadRequest, NotFound, Unavailable
from app.runtime.admission import Submission
from app.runtime.store import Found, SessionNotFound, TurnLease
from app.runtime.store.base import pinned, session_copy
from app.schemas.sessions import RunCreate
from app.services.agent_directory import AgentInfo
from app.services.agent_refs import pinned_spec
from app.services.pages import check_limit, page
from app.services.sessions import get_session
from app.state import AppState

__all__ = [
    "SessionNotFound",
    "check_session_agent",
    "get_run",
    "list_runs",
    "prepare_submission",
    "session_cache",
]


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
    """Sessions looked up for turns (``AppState.turn_sessions``), see ``_look_up``."""
    return TTLCache(TURN_SESSIONS, ttl_s, max_sessions)


async def _look_up(
    state: AppState, lease: TurnLease, tenant_id: str, session_id: str, fresh: bool
) -> tuple[Found, bool]:
    """The session for a turn, and whether it came from the cache.

    What a turn reads of a session does not change while it exists (its pk, agent, pinned
    version and spec, creation time), so it is kept for ``session_cache_ttl_s`` when its
    tenant has no token budget and its agent no session budget (those figures must be read
    afresh every turn): such a turn then needs no lookup statement. A cached session deleted
    meanwhile (here its entry is dropped at once; on another replica it expires) fails its
    admission, which then looks it up afresh (``Submission.relookup``).
    """
    key = (tenant_id, session_id)
    cache = state.turn_sessions
    if not fresh and state.tenant_usage.unlimited.get(tenant_id):
        found = cache.get(key)
        if found is not None:
            return found, True
    found = await state.run_manager.store.lookup(lease, tenant_id, session_id)
    budget = found.spec.budget
    if found.tenant_limit is None and (budget is None or budget.max_total_tokens is None):
        state.tenant_usage.unlimited.put(tenant_id, True)
        cache.put(key, found)
    return found, False


def remember_created(state: AppState, db: AsyncSession, row: SessionRow, agent: Agent) -> None:
    """Keep what a turn reads of a session being created (as ``_look_up`` keeps it), once its
    transaction commits: its first turn then needs no lookup either. Only for a tenant known
    to have no budget and an agent without a session budget (else turns read them)."""
    spec = pinned(agent.id, agent.version, agent.spec)
    budget = spec.budget
    if not state.tenant_usage.unlimited.get(row.tenant_id) or (
        budget is not None and budget.max_total_tokens is not None
    ):
        return
    found = Found(session_copy(row), agent.name, spec, None, 0)
    key = (row.tenant_id, row.id)
    listen(
        db.sync_session, "after_commit", lambda _s: state.turn_sessions.put(key, found), once=True
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
    fresh: bool = False,
) -> Submission:
    """Look the session and its pinned spec up (``_look_up``: cached, or through the run
    store on the turn's ``lease``; on PostgreSQL that connection goes on to the run's
    admission, ``RunManager.submit``).

    ``agent``: the agent the session must belong to (the chat endpoint's model); ``source``:
    the entry point, kept in the run's options (``openai``); ``fresh``: never from the cache.
    404 ``SessionNotFound`` for an unknown session; 429 ``budget_exceeded`` when the session's
    or tenant's budget is spent.
    """
    found, cached = await _look_up(state, lease, tenant_id, session_id, fresh)
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
        relookup=(
            partial(
                _relookup,
                state,
                lease,
                tenant_id,
                session_id,
                body,
                idempotency_key,
                agent=agent,
                source=source,
            )
            if cached
            else None
        ),
    )


async def _relookup(
    state: AppState, lease: TurnLease, tenant_id: str, session_id: str, *args: Any, **kw: Any
) -> Submission:
    """The submission again, its session read afresh (the cached one was gone at admission)."""
    state.turn_sessions.pop((tenant_id, session_id))
    return await prepare_submission(state, lease, tenant_id, session_id, *args, **kw, fresh=True)


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
