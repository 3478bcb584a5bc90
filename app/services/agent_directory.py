"""Each tenant's agents by name, cached per replica for chat completions and /v1/models.

Changes made through this process (app.services.agents) drop the tenant's entry at once and
again after their commit; other replicas see a created, changed or deleted agent within
``ttl_s`` (AGENTSTATION_AGENT_CACHE_TTL_S). A cached map also answers "no such agent", so a
raw-model request costs no query: creating an agent named like a raw model takes effect on
other replicas within the same ``ttl_s``. Concurrent misses of one tenant (every request in
flight when its entry expires) share one query.
"""

from __future__ import annotations

import asyncio
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


class _Entries(TTLCache[str, dict[str, AgentInfo]]):
    """The tenants' maps; dropping a tenant (``app.cache.invalidate``) also forgets its query in
    flight, so requests after a change never join a read that may predate it."""

    def __init__(self, ttl_s: float, max_tenants: int, clock: Callable[[], float]) -> None:
        super().__init__(KIND, ttl_s, max_tenants, clock)
        self.loading: dict[str, asyncio.Task[dict[str, AgentInfo]]] = {}

    def pop(self, key: str) -> None:
        super().pop(key)
        self.loading.pop(key, None)

    def clear(self) -> None:
        super().clear()
        self.loading.clear()


class AgentDirectory:
    """Per-tenant agent maps with a time to live (``ttl_s <= 0``: read every time)."""

    def __init__(
        self,
        ttl_s: float = 2.0,
        max_tenants: int = 1024,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.cache = _Entries(ttl_s, max_tenants, clock)

    async def agents(
        self, sessions: async_sessionmaker[AsyncSession], tenant_id: str
    ) -> dict[str, AgentInfo]:
        """The tenant's agents by name (newest first), from the cache or one query."""
        found = self.cache.get(tenant_id)
        if found is not None:
            return found
        if self.cache.ttl_s <= 0:
            return await self._read(sessions, tenant_id)
        # When the entry expires under load, every request in flight misses it at once: they
        # share one query (and so one AgentInfo: one validated spec, one built agent), which a
        # caller that is cancelled does not cancel for the others.
        loading = self.cache.loading.get(tenant_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(sessions, tenant_id))
            self.cache.loading[tenant_id] = loading
        return await asyncio.shield(loading)

    async def _load(
        self, sessions: async_sessionmaker[AsyncSession], tenant_id: str
    ) -> dict[str, AgentInfo]:
        me = asyncio.current_task()
        try:
            found = await self._read(sessions, tenant_id)
            if self.cache.loading.get(tenant_id) is me:  # else invalidated while it ran
                self.cache.put(tenant_id, found)
            return found
        finally:
            if self.cache.loading.get(tenant_id) is me:
                del self.cache.loading[tenant_id]

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
