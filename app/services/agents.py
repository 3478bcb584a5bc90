"""Agent definitions: create, read, list, update (new version), delete."""

from __future__ import annotations

import asyncio

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.cache import TURN_SESSIONS, invalidate_on_commit
from app.db.base import new_id, utcnow
from app.db.models import Agent, AgentVersion, Run
from app.db.models import Session as SessionRow
from app.errors import BadRequest, Conflict, NotFound
from app.runtime.registry import Registry
from app.schemas.agents import AgentCreate, AgentPublic, AgentSpec, AgentUpdate
from app.schemas.vocab import BUSY
from app.services.agent_directory import KIND as CACHE_KIND
from app.services.agent_refs import check_refs
from app.services.pages import check_limit, page


def to_public(agent: Agent) -> AgentPublic:
    """The API shape of an agent."""
    return AgentPublic(
        id=agent.id,
        name=agent.name,
        description=agent.description,
        version=agent.version,
        spec=agent.spec,
        created_at=agent.created_at,
        updated_at=agent.updated_at,
    )


def _spec_json(spec: AgentSpec) -> dict[str, object]:
    return spec.model_dump(mode="json", exclude_none=True)


async def get_agent(db: AsyncSession, tenant_id: str, name: str) -> Agent:
    """The tenant's agent called ``name`` (404 otherwise)."""
    agent = await db.scalar(
        sa.select(Agent).where(Agent.tenant_id == tenant_id, Agent.name == name)
    )
    if agent is None:
        raise NotFound(f"agent {name!r} not found", param="name")
    return agent


async def agent_spec(db: AsyncSession, agent_id: str, version: int) -> AgentSpec:
    """The spec of one version of an agent."""
    row = await db.get(AgentVersion, (agent_id, version))
    if row is None:
        raise NotFound(f"agent version {version} not found")
    return AgentSpec.model_validate(row.spec)


async def create_agent(
    db: AsyncSession, tenant_id: str, body: AgentCreate, registry: Registry, models: list[str]
) -> Agent:
    """Validate the spec and store version 1."""
    registry.validate(body.spec, models)
    await asyncio.to_thread(registry.check_remotes, body.spec)  # resolves remote hosts
    await check_refs(db, tenant_id, body.name, body.spec)
    now = utcnow()
    agent = Agent(
        id=new_id("agent"),
        tenant_id=tenant_id,
        name=body.name,
        description=body.description,
        version=1,
        spec=_spec_json(body.spec),
        created_at=now,
        updated_at=now,
    )
    try:
        async with db.begin_nested():
            db.add(agent)
            await db.flush()
    except IntegrityError as exc:
        raise Conflict(
            f"agent {body.name!r} already exists", param="name", code="agent_exists"
        ) from exc
    db.add(AgentVersion(agent_id=agent.id, version=1, spec=agent.spec, created_at=now))
    await db.flush()
    invalidate_on_commit(db, CACHE_KIND, tenant_id)  # chat with this name stops meaning a model
    return agent


async def update_agent(
    db: AsyncSession,
    tenant_id: str,
    name: str,
    body: AgentUpdate,
    registry: Registry,
    models: list[str],
) -> Agent:
    """Store a new version of the spec (version + 1)."""
    agent = await get_agent(db, tenant_id, name)
    registry.validate(body.spec, models)
    await asyncio.to_thread(registry.check_remotes, body.spec)  # resolves remote hosts
    await check_refs(db, tenant_id, name, body.spec)
    agent.version += 1
    agent.spec = _spec_json(body.spec)
    if "description" in body.model_fields_set:
        agent.description = body.description
    agent.updated_at = utcnow()
    db.add(AgentVersion(agent_id=agent.id, version=agent.version, spec=agent.spec))
    await db.flush()
    invalidate_on_commit(db, CACHE_KIND, tenant_id)
    return agent


async def active_runs(db: AsyncSession, tenant_id: str, name: str) -> list[str]:
    """Ids of the queued, running or waiting runs on the agent's sessions."""
    agent = await get_agent(db, tenant_id, name)
    rows = await db.scalars(
        sa.select(Run.id)
        .join(SessionRow, SessionRow.pk == Run.session_pk)
        .where(SessionRow.agent_id == agent.id, Run.status.in_(BUSY))
    )
    return list(rows)


async def delete_agent(db: AsyncSession, tenant_id: str, name: str) -> None:
    """Delete the agent, its versions and its sessions."""
    agent = await get_agent(db, tenant_id, name)
    await db.delete(agent)
    await db.flush()
    invalidate_on_commit(db, CACHE_KIND, tenant_id)
    invalidate_on_commit(db, TURN_SESSIONS)  # its sessions went with it


async def list_agents(
    db: AsyncSession, tenant_id: str, limit: int, after: str | None
) -> tuple[list[Agent], bool]:
    """A page of the tenant's agents, newest first; ``after`` is an agent name or id."""
    check_limit(limit)
    cursor = None
    if after is not None:
        row = await db.scalar(
            sa.select(Agent).where(
                Agent.tenant_id == tenant_id, sa.or_(Agent.name == after, Agent.id == after)
            )
        )
        if row is None:
            raise BadRequest(f"unknown cursor {after!r}", param="after", code="invalid_cursor")
        cursor = (row.created_at, row.id)
    stmt = sa.select(Agent).where(Agent.tenant_id == tenant_id)
    return await page(db, stmt, Agent.created_at, Agent.id, limit, cursor)
