"""Each tenant's agents by name, cached per replica for chat completions and /v1/models.

Changes made through this process (app.services.agents) drop the tenant's entry at once and
again after their commit; other replicas see a created, changed or deleted agent within
``ttl_s`` (AGENTSTATION_AGENT_CACHE_TTL_S). A cached map also answers "no such agent", so a
raw-model request costs no query: creating an agent named like a raw model takes effect on
other replicas within the same ``ttl_s``. Concurrent misses of one tenant (every request in
flight when its entry expires) share one query.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import cached_property
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.cache import TTLCache
from app.db.models import Agent
from app.schemas.agents import AgentSpec

KIND = "agents"  # the cache kind app.services.agents invalidates (key: tenant id)


@dataclass(eq=False)
class AgentInfo:
    """What chat completions and /v1/models need of an agent (its current version)."""

    id: str
    name: str
    version: int
    spec_json: dict[str, Any]
    created_at: datetime
    # (the LLM it was built with, the agent): the one agent object stateless chat requests of
    # a shared kind run in (AppState.stateless_agent). It lives and expires with this entry, so
    # a changed, deleted or re-created agent (a new entry) gets a new one.
    built: tuple[Any, Any] | None = field(default=None, repr=False)

    @cached_property
    def spec(self) -> AgentSpec:
        """The validated spec (validated once per cached entry; treat it as read-only)."""
        return AgentSpec.model_validate(self.spec_json)


async def load_agents(db: AsyncSession, tenant_id: str) -> dict[str, AgentInfo]:
    """The tenant's agents by name, newest first."""
    rows = await db.execute(
        sa.select(Agent.id, Agent.name, Agent.version, Agent.spec, Agent.created_at)
        .where(Agent.tenant_id == tenant_id)
        .order_by(Agent.created_at.desc(), Agent.id.desc())
    )
    return {r.name: AgentInfo(r.id, r.name, r.version, r.spec, r.created_at) for r in rows}


class AgentDirectory:
    """Per-tenant agent maps with a time to live (``ttl_s <= 0``: read every time)."""

    def __init__(
        self,
        ttl_s: float = 2.0,
        max_tenants: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache: TTLCache[str, dict[str, AgentInfo]] = TTLCache(KIND, ttl_s, max_tenants, clock)

    async def agents(
        self, sessions: async_sessionmaker[AsyncSession], tenant_id: str
    ) -> dict[str, AgentInfo]:
        """The tenant's agents by name (newest first), from the cache or one query."""
        # Concurrent misses share one query (so one AgentInfo: one validated spec, one built
        # agent); a change made meanwhile is never hidden by it (TTLCache.load).
        found = await self.cache.load(tenant_id, lambda: self._read(sessions, tenant_id))
        assert found is not None  # a tenant without agents has an empty map
        return found

    @staticmethod
    async def _read(
        sessions: async_sessionmaker[AsyncSession], tenant_id: str
    ) -> dict[str, AgentInfo]:
        async with sessions() as db:
            return await load_agents(db, tenant_id)

    async def find(
        self, sessions: async_sessionmaker[AsyncSession], tenant_id: str, name: str
    ) -> AgentInfo | None:
        """The tenant's agent called ``name``, or None."""
        return (await self.agents(sessions, tenant_id)).get(name)
