"""Where a new response runs: the model or agent it names, and its session (docs/responses.md,
"The mapping").

- ``model``: a stored agent, else a raw model's agent ``responses.<model>`` of kind ``model``
  (created on first use); ``raw_model``/``stateless``: a ``store: false`` answer that needs no
  session at all (``responses_stateless``).
- The session: ``previous_response_id``'s (the chain goes on in it), or a fork of it at that
  response when the chain already went on from there, or another model answers (two responses
  naming one ``previous_response_id`` each see the history up to it, not each other); a
  response whose approval requests were answered forks at its pause (the session's memory
  then, kept with the answer: ``responses_resumed``);
  ``conversation``'s (the conversation is a session); else a new session ``chain_...``.
  ``store: false`` runs in a session of its own (a fork when it continues a chain or a
  conversation), deleted when the run ends.
"""

from __future__ import annotations

import sqlite3
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from app.db import raw
from app.db.models import Agent, ResponseContinuation, Run
from app.db.models import Session as SessionRow
from app.engines.base import ModelHandle
from app.errors import BadRequest, Conflict, NotFound, Unavailable
from app.schemas.agents import AgentCreate, AgentSpec
from app.schemas.responses import ResponseCreate
from app.schemas.sessions import SessionCreate
from app.services import responses_ids as ids
from app.services import responses_read as read
from app.services import responses_resumed as continued
from app.services.agent_directory import AgentInfo
from app.services.agents import create_agent
from app.services.auth import Principal
from app.services.forks import counts_at, fork_session
from app.services.sessions import new_session
from app.state import AppState

SOURCE = "responses"  # the run's ``options.source``


@dataclass
class Planned:
    """Where a new response runs."""

    session_id: str
    agent: AgentInfo
    key: str  # the route key of its ids
    forget: bool  # store: false: the session goes when the run ends
    new: bool = False  # made for this response (a new chain or a fork): gone if it is refused


async def agent_for(state: AppState, who: Principal, model: str) -> AgentInfo:
    """The stored agent called ``model``, else the raw model's implicit agent (404 for
    neither)."""
    agents = await state.agents.agents(state.sessionmaker, who.tenant_id)
    agent = agents.get(model)
    if agent is not None:
        return agent
    if model not in state.models.names() or not who.may_use(model):
        raise NotFound(f"model {model!r} not found", param="model", code="model_not_found")
    name = ids.implicit_agent_name(model)
    agent = agents.get(name)
    if agent is not None and agent.spec.kind == "model" and agent.spec.model == model:
        return agent
    if agent is None:
        spec = AgentSpec(kind="model", model=model)
        body = AgentCreate(
            name=name,
            description=f"The Responses API's agent for the model {model!r}",
            spec=spec,
        )
        async with state.sessionmaker() as db, db.begin():
            try:
                await create_agent(db, who.tenant_id, body, state.registry, state.models.names())
            except Conflict:  # a concurrent first request created it
                pass
        agent = await state.agents.find(state.sessionmaker, who.tenant_id, name)
    if agent is None or agent.spec.kind != "model" or agent.spec.model != model:
        raise BadRequest(
            f"the agent {name!r} exists and is not the model {model!r}'s", param="model"
        )
    return agent


async def raw_model(state: AppState, who: Principal, model: str) -> ModelHandle | None:
    """The raw model ``model`` names (None: it names a stored agent); 404 for neither, 503
    while it loads."""
    if model in await state.agents.agents(state.sessionmaker, who.tenant_id):
        return None
    handle = state.models.get(model)
    if handle is None or not who.may_use(model):
        raise NotFound(f"model {model!r} not found", param="model", code="model_not_found")
    if not handle.ready:
        raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
    return handle


def stateless(req: ResponseCreate) -> bool:
    """Whether the response can run without a session: nothing to keep, nothing to continue."""
    return not (req.store or req.background or req.previous_response_id or req.conversation_id())


def one_parent(req: ResponseCreate) -> str | None:
    """The request's conversation; a 400 when it names a ``previous_response_id`` too."""
    conversation = req.conversation_id()
    if req.previous_response_id and conversation:
        raise BadRequest(
            "previous_response_id and conversation cannot be used together",
            param="conversation",
            code="not_supported",
        )
    return conversation


async def plan(
    state: AppState, who: Principal, req: ResponseCreate, agent: AgentInfo, header: str | None
) -> Planned:
    """The session a new response runs in (module docstring)."""
    conversation = one_parent(req)
    if req.background and not req.store:
        raise BadRequest(
            "background responses must be stored (store: true)", param="store", code="not_supported"
        )
    forget = not req.store
    key = ids.route_key(header, req.previous_response_id or conversation)
    tenant = who.tenant_id
    if req.previous_response_id:
        return await _continue(state, tenant, req.previous_response_id, agent, key, forget)
    if conversation:
        return await _conversation(state, tenant, conversation, agent, key, forget)
    session_id = ids.mint(ids.CHAIN, key)
    # One statement through the run store, as POST /v1/sessions (its first turn needs no lookup).
    body = SessionCreate(agent=agent.name, id=session_id, metadata={"source": SOURCE})
    await new_session(state, tenant, body)
    return Planned(session_id, agent, key, forget, new=True)


# A chain's next turn, in one statement: the previous response's tenant, session and agent,
# the session's latest run (is the previous response still the chain's end?) and the segment
# of the run's latest response (a run that went on after approval is several responses).
# Sent straight to the driver (``app.db.raw``), as the run store's session lookup: through the
# ORM this one read cost ~1 ms of the event loop's CPU, about a quarter of a chain turn's.
_CHAIN_END_SQL = (
    "SELECT runs.tenant_id, sessions.id, sessions.agent_id,"
    " (SELECT latest.id FROM runs AS latest WHERE latest.session_pk = sessions.pk"
    " ORDER BY latest.created_at DESC, latest.id DESC LIMIT 1),"
    " (SELECT max(response_continuations.segment) FROM response_continuations"
    " WHERE response_continuations.run_id = runs.id)"
    " FROM runs JOIN sessions ON sessions.pk = runs.session_pk WHERE runs.id = {}"
)
_CHAIN_END_SQLITE = _CHAIN_END_SQL.format("?")
_CHAIN_END_PG = _CHAIN_END_SQL.format("$1")


async def chain_end(state: AppState, run_id: str) -> tuple[Any, ...] | None:
    """(tenant, session id, agent id, the session's latest run id, the run's last segment or
    None) of the run ``run_id``; None for no such run."""
    engine = state.engine
    if engine.dialect.name == "postgresql":
        async with raw.pooled(engine) as pg:
            row = await raw.fetchrow(pg, _CHAIN_END_PG, run_id)
        return tuple(row) if row is not None else None
    found = await raw.on_sqlite(engine, _chain_end_sqlite, run_id)  # a plain read
    return tuple(found) if found is not None else None


def _chain_end_sqlite(handle: sqlite3.Connection, run_id: str) -> Any:
    if raw.listeners:
        raw.report(_CHAIN_END_SQLITE)
    return handle.execute(_CHAIN_END_SQLITE, (run_id,)).fetchone()


async def _continue(
    state: AppState, tenant: str, previous: str, agent: AgentInfo, key: str, forget: bool
) -> Planned:
    """The chain goes on in ``previous``'s session, or in a fork of it at ``previous`` (404
    naming ``previous_response_id`` for an unknown or another tenant's response). A response
    that waited for approval and was answered forks at its pause."""
    found, run_id, segment = None, previous, 0
    if previous.startswith(ids.RESPONSE):
        found = await chain_end(state, previous)
        if found is None:  # a continuation's id: its run's log after one of its pauses
            async with state.sessionmaker() as db:
                cont = await db.get(ResponseContinuation, previous)
            if cont is not None and not (cont.request or {}).get("deleted"):
                run_id, segment = cont.run_id, cont.segment
                found = await chain_end(state, run_id)
    if found is None or found[0] != tenant:
        raise read.not_found(previous, "previous_response_id")
    _, session_id, agent_id, latest, last = found
    at_pause: dict[str, int] | None = None  # a response answered since: fork at its pause
    if segment != (last or 0):
        await read.find(state, tenant, previous, "previous_response_id")  # 404 if deleted
        answer = await continued.following(state, run_id, segment)
        at_pause = answer[1].get("memory") if answer is not None else None
        if at_pause is None:  # (answered before the memory at a pause was kept)
            raise Conflict(
                f"response {previous!r} waited for approval and was answered; continue from"
                " its answer (the response whose previous_response_id it is)",
                param="previous_response_id",
            )
    if at_pause is None and latest == run_id and agent_id == agent.id and not forget:
        return Planned(session_id, agent, key, forget)  # the chain's end: it goes on there
    async with state.sessionmaker() as db, db.begin():
        parent = await db.get(Run, run_id)
        session = await db.get(SessionRow, parent.session_pk) if parent is not None else None
        if parent is None or session is None:  # deleted meanwhile
            raise read.not_found(previous, "previous_response_id")
        counts = at_pause if at_pause is not None else await counts_at(db, session.pk, parent)
        agent_row = await db.get(Agent, agent.id)
        assert agent_row is not None
        fork = await fork_session(
            db, session, counts, agent_row, ids.mint(ids.CHAIN, key), {"source": SOURCE}
        )
        return Planned(fork.id, agent, key, forget, new=True)


async def _conversation(
    state: AppState, tenant: str, conversation: str, agent: AgentInfo, key: str, forget: bool
) -> Planned:
    """A conversation's session (its agent switched to ``agent`` when both are raw models'
    agents, or it has no run yet); ``store: false`` forks it."""
    async with state.sessionmaker() as db, db.begin():
        session = await db.scalar(
            sa.select(SessionRow).where(
                SessionRow.tenant_id == tenant, SessionRow.id == conversation
            )
        )
        if session is None or not conversation.startswith(ids.CONVERSATION):
            raise NotFound(
                f"Conversation with id '{conversation}' not found.",
                param="conversation",
                code="conversation_not_found",
            )
        agent_row = await db.get(Agent, agent.id)
        assert agent_row is not None
        if forget:
            last = await db.scalar(
                sa.select(Run)
                .where(Run.session_pk == session.pk)
                .order_by(Run.created_at.desc(), Run.id.desc())
                .limit(1)
            )
            counts = (
                await counts_at(db, session.pk, last)
                if last is not None
                else await _all(db, session)
            )
            fork = await fork_session(db, session, counts, agent_row, ids.mint(ids.CHAIN, key))
            return Planned(fork.id, agent, key, forget, new=True)
        if session.agent_id != agent.id:
            current = await db.get(Agent, session.agent_id)
            implicit = (current is not None and current.name.startswith(ids.IMPLICIT_AGENT)) and (
                agent.name.startswith(ids.IMPLICIT_AGENT)
            )
            ran = await db.scalar(sa.select(Run.id).where(Run.session_pk == session.pk).limit(1))
            if not implicit and ran is not None:
                raise BadRequest(
                    f"conversation {conversation!r} is with {current.name if current else '?'}"
                    f"; it cannot go on with {agent.name!r}",
                    param="model",
                    code="not_supported",
                )
            session.agent_id, session.agent_version = agent.id, agent.version
            state.turn_sessions.pop((tenant, conversation))
    return Planned(conversation, agent, key, forget)


async def _all(db: Any, session: SessionRow) -> dict[str, int]:
    from app.runtime.store.rows import load_state

    return {k: len(v) for k, v in (await load_state(db, session.pk)).items()}
