"""An agent's version history: list, read one, roll back (a new version with an old spec)."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.cache import invalidate_on_commit
from app.db.base import utcnow
from app.db.models import Agent, AgentVersion
from app.errors import BadRequest, NotFound
from app.runtime.registry import Registry
from app.schemas.agents import AgentSpec, AgentVersionPublic
from app.services.agent_directory import KIND as CACHE_KIND
from app.services.agent_refs import check_refs
from app.services.agents import get_agent
from app.services.pages import check_limit

_MAX_VERSION = 2**31 - 1


def to_public(agent: Agent, row: AgentVersion) -> AgentVersionPublic:
    """The API shape of one version."""
    return AgentVersionPublic(
        agent=agent.name,
        version=row.version,
        spec=row.spec,
        created_at=row.created_at,
        current=row.version == agent.version,
    )


def _number(text: str) -> int | None:
    """A version number written in a path or cursor (digits, 1..2^31-1), else None."""
    if not text.isascii() or not text.isdigit() or len(text) > 10:
        return None
    value = int(text)
    return value if 1 <= value <= _MAX_VERSION else None


async def list_versions(
    db: AsyncSession, tenant_id: str, name: str, limit: int, after: str | None
) -> tuple[Agent, list[AgentVersion], bool]:
    """A page of the agent's versions, newest first; ``after`` is the last version number seen."""
    check_limit(limit)
    agent = await get_agent(db, tenant_id, name)
    stmt = sa.select(AgentVersion).where(AgentVersion.agent_id == agent.id)
    if after is not None:
        cursor = _number(after)
        if cursor is None or await db.get(AgentVersion, (agent.id, cursor)) is None:
            raise BadRequest(f"unknown cursor {after!r}", param="after", code="invalid_cursor")
        stmt = stmt.where(AgentVersion.version < cursor)
    rows = list(await db.scalars(stmt.order_by(AgentVersion.version.desc()).limit(limit + 1)))
    return agent, rows[:limit], len(rows) > limit


async def get_version(
    db: AsyncSession, tenant_id: str, name: str, version: str | int
) -> tuple[Agent, AgentVersion]:
    """The agent and its version ``version`` (404 for an unknown agent or version)."""
    agent = await get_agent(db, tenant_id, name)
    number = _number(version) if isinstance(version, str) else version
    row = None if number is None else await db.get(AgentVersion, (agent.id, number))
    if row is None:
        raise NotFound(f"agent {name!r} has no version {version!r}", param="version")
    return agent, row


async def rollback(
    db: AsyncSession,
    tenant_id: str,
    name: str,
    version: int,
    registry: Registry,
    models: list[str],
) -> tuple[Agent, AgentVersion]:
    """Make version ``version``'s spec current as a new version (history kept); the spec is
    validated again, as the registry, the models or the agents it names may have changed."""
    agent, old = await get_version(db, tenant_id, name, version)
    spec = AgentSpec.model_validate(old.spec)
    registry.validate(spec, models)
    await check_refs(db, tenant_id, name, spec)
    now = utcnow()
    agent.version += 1
    agent.spec = dict(old.spec)
    agent.updated_at = now
    row = AgentVersion(agent_id=agent.id, version=agent.version, spec=agent.spec, created_at=now)
    db.add(row)
    await db.flush()
    invalidate_on_commit(db, CACHE_KIND, tenant_id)
    return agent, row
