"""Sessions and their memory (the agent's state_dict, stored as append-only message rows)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import sqlalchemy as sa
from sqlalchemy.event import listen
from sqlalchemy.ext.asyncio import AsyncSession

from agents.memory import load_message
from app.db.base import new_id, transient, utcnow
from app.db.models import Agent, Message, Run
from app.db.models import Session as SessionRow
from app.errors import BadRequest, NotFound, ValidationFailed
from app.runtime.kernels import prestart_kernels
from app.runtime.memory_cache import Lists
from app.runtime.messages import dump_message
from app.runtime.public import iso
from app.runtime.store import Found, NewSession
from app.runtime.store.rows import SESSIONS, load_state, memory_rev_bump
from app.schemas.sessions import MemoryEntry, SessionCreate, SessionPublic, SessionUpdate
from app.schemas.vocab import BUSY
from app.services.agent_refs import resolve_refs
from app.services.agents import agent_spec, get_agent
from app.services.pages import check_limit, page
from app.state import AppState


def to_public(row: SessionRow, agent_name: str) -> SessionPublic:
    """The API shape of a session."""
    return SessionPublic(
        id=row.id,
        agent=agent_name,
        agent_version=row.agent_version,
        metadata=row.metadata_,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


async def get_session(
    db: AsyncSession, tenant_id: str, session_id: str
) -> tuple[SessionRow, Agent]:
    """The tenant's session and its agent (404 otherwise)."""
    found = (
        await db.execute(
            sa.select(SessionRow, Agent)
            .join(Agent, Agent.id == SessionRow.agent_id)
            .where(SessionRow.tenant_id == tenant_id, SessionRow.id == session_id)
        )
    ).first()
    if found is None:
        raise NotFound(f"session {session_id!r} not found", param="id")
    return found[0], found[1]


async def create_session(
    state: AppState,
    tenant_id: str,
    body: SessionCreate,
    memory: Sequence[dict[str, Any]] = (),
) -> tuple[NewSession, int]:
    """The one way a session is made (``POST /v1/sessions``, a conversation, a Responses
    chain, an A2A context, a turn's first message): on the agent's current version, in one
    statement through the run store (with ``memory``, its first message rows, all or nothing;
    the ORM's version took four round trips and ~3 ms of Python); the session and its agent
    version. Its kernels start in the background, and its first turn needs no lookup: kept as
    ``_look_up`` keeps a session, for a tenant known to have no budget and an agent without a
    session budget (else turns read them). 422 ``unknown_agent``, 409 ``session_exists``."""
    now = utcnow()
    new = NewSession(
        new_id("sesspk"),
        tenant_id,
        body.id or new_id("sess"),
        body.agent,
        body.metadata,
        now,
        memory,
    )
    agent_id, version, spec = await state.run_manager.store.create_session(new)
    prestart_kernels(state.kernel_pool, f"{tenant_id}:{new.id}", spec)  # in the background
    budget = spec.budget
    if state.tenant_usage.unlimited.get(tenant_id) and (
        budget is None or budget.max_total_tokens is None
    ):
        row = transient(
            SessionRow,
            pk=new.pk,
            tenant_id=tenant_id,
            id=new.id,
            agent_id=agent_id,
            agent_version=version,
            metadata_=new.metadata,
            created_at=now,
            updated_at=now,
            memory_rev=1 if memory else 0,
        )
        state.turn_sessions.put((tenant_id, new.id), Found(row, body.agent, spec, None, 0))
    return new, version


async def new_session(state: AppState, tenant_id: str, body: SessionCreate) -> dict[str, Any]:
    """``POST /v1/sessions``: a new session (``create_session``); its API shape
    (``SessionPublic``, usage 0)."""
    new, version = await create_session(state, tenant_id, body)
    at = iso(new.at)
    return {
        "id": new.id,
        "agent": body.agent,
        "agent_version": version,
        "metadata": new.metadata,
        "created_at": at,
        "updated_at": at,
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


async def update_session(
    db: AsyncSession, tenant_id: str, session_id: str, body: SessionUpdate
) -> tuple[SessionRow, Agent]:
    """Merge ``body.metadata`` into the session's metadata (null removes a key)."""
    row, agent = await get_session(db, tenant_id, session_id)
    metadata = dict(row.metadata_ or {})
    for key, value in body.metadata.items():
        if value is None:
            metadata.pop(key, None)
        else:
            metadata[key] = value
    row.metadata_ = metadata  # a new dict: the JSON column sees the change
    row.updated_at = utcnow()
    await db.flush()
    return row, agent


async def list_sessions(
    db: AsyncSession, tenant_id: str, agent: str | None, limit: int, after: str | None
) -> tuple[list[tuple[SessionRow, str]], bool]:
    """A page of sessions (optionally of one agent), newest first."""
    check_limit(limit)
    stmt = sa.select(SessionRow).where(SessionRow.tenant_id == tenant_id)
    if agent is not None:
        agent_row = await get_agent(db, tenant_id, agent)
        stmt = stmt.where(SessionRow.agent_id == agent_row.id)
    cursor = None
    if after is not None:
        row = await db.scalar(
            sa.select(SessionRow).where(SessionRow.tenant_id == tenant_id, SessionRow.id == after)
        )
        if row is None:
            raise BadRequest(f"unknown cursor {after!r}", param="after", code="invalid_cursor")
        cursor = (row.created_at, row.pk)
    rows: list[SessionRow]
    rows, more = await page(db, stmt, SessionRow.created_at, SessionRow.pk, limit, cursor)
    result = await db.execute(
        sa.select(Agent.id, Agent.name).where(Agent.id.in_({r.agent_id for r in rows}))
    )
    names = {agent_id: name for agent_id, name in result}
    return [(r, names[r.agent_id]) for r in rows], more


async def active_run(db: AsyncSession, session_pk: str) -> str | None:
    """The id of a queued, running or waiting run of the session, if any."""
    found: str | None = await db.scalar(
        sa.select(Run.id).where(Run.session_pk == session_pk, Run.status.in_(BUSY))
    )
    return found


async def get_memory(
    db: AsyncSession, row: SessionRow, keys: set[str]
) -> dict[str, list[dict[str, Any]]]:
    """The session's state_dict: every key of the agent, filled from the stored rows."""
    stored = await load_state(db, row.pk)
    return {key: stored.get(key, []) for key in sorted(keys | set(stored))}


async def memory_keys(db: AsyncSession, state: AppState, row: SessionRow, agent: Agent) -> set[str]:
    """The state_dict keys of the session's agent (``memory``, ``writer.memory``, …)."""
    spec = await agent_spec(db, agent.id, row.agent_version)
    spec = await resolve_refs(db, row.tenant_id, spec, row.created_at)
    return set(state.build_agent(spec, agent.name).state_dict("keys"))


async def replace_memory(
    db: AsyncSession,
    row: SessionRow,
    state: dict[str, Any],
    keys: set[str] | None = None,
    keep: Callable[[str, int, Lists], None] | None = None,
) -> dict[str, list[dict[str, Any]]]:
    """Replace the stored state_dict (import, fork); entries must be AgentMessages.

    ``keep`` (``RunManager.keep_memory``): once the caller's transaction commits, the new
    memory is kept in process at its new revision, so the session's next turn neither reads
    nor re-validates it."""
    cleaned: dict[str, list[dict[str, Any]]] = {}
    for key, items in state.items():
        if keys is not None and key not in keys:
            raise ValidationFailed(
                f"{key}: not a memory of this agent; its keys are {sorted(keys)}",
                param=key,
                code="unknown_memory_key",
            )
        if not isinstance(items, list):
            raise ValidationFailed(f"{key}: expected a list of messages", param=key)
        try:
            cleaned[key] = [dump_message(load_message(_as_message(m))) for m in items]
        except (TypeError, ValueError) as exc:
            raise ValidationFailed(f"{key}: {exc}", param=key, code="invalid_message") from exc
    await db.execute(sa.delete(Message).where(Message.session_pk == row.pk))
    db.add_all(
        Message(session_pk=row.pk, key=key, index=i, data=data)
        for key, items in cleaned.items()
        for i, data in enumerate(items)
    )
    await db.flush()
    # In-process copies of the old memory go stale.
    rev = await db.scalar(_touched(row).returning(SESSIONS.c.memory_rev))
    for key in keys or ():
        cleaned.setdefault(key, [])
    if keep is not None and keys is not None and rev is not None:
        lists = {key: [load_message(m) for m in cleaned[key]] for key in keys}
        # Kept only if this transaction commits (its revision then names exactly this memory).
        listen(db.sync_session, "after_commit", lambda _s: keep(row.pk, rev, lists), once=True)
    return dict(sorted(cleaned.items()))


def _as_message(item: Any) -> Any:
    if not isinstance(item, dict | str):
        raise TypeError("each entry must be an AgentMessage object or a string")
    if isinstance(item, dict) and "content" not in item:
        raise ValueError("an AgentMessage needs 'content'")
    if isinstance(item, dict):
        # As the document describes an entry (MemoryEntry): JSON true is not a stream state.
        if isinstance(item.get("stream_state"), bool):
            raise TypeError("stream_state must be an integer (AgentStatusCode)")
        MemoryEntry.model_validate(item, strict=True)  # a ValidationError is a ValueError
    return item


async def reset_memory(db: AsyncSession, row: SessionRow) -> None:
    """Forget everything the session remembers."""
    await db.execute(sa.delete(Message).where(Message.session_pk == row.pk))
    await db.execute(_touched(row))  # in-process copies of the old memory go stale


def _touched(row: SessionRow) -> sa.Update:
    """The memory revision bumped and ``updated_at`` set (``row`` too: it may be detached,
    read in another transaction than the write's, see ``RunManager.writing_memory``)."""
    row.updated_at = utcnow()
    return memory_rev_bump(row.pk).values(updated_at=row.updated_at)
