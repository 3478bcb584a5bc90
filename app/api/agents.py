"""/v1/agents: versioned agent definitions."""

from __future__ import annotations

from fastapi import APIRouter, Response

from app.api.pages import After, Limit
from app.deps import DbDep, PrincipalDep, RunsDep, StateDep
from app.schemas.agents import (
    AgentCreate,
    AgentList,
    AgentPublic,
    AgentRollback,
    AgentUpdate,
    AgentVersionList,
    AgentVersionPublic,
)
from app.schemas.vocab import CancelMode
from app.services import agent_versions as versions
from app.services import agents as service

router = APIRouter(prefix="/v1/agents", tags=["agents"])


@router.post("", status_code=201)
async def create_agent(
    body: AgentCreate, db: DbDep, who: PrincipalDep, state: StateDep
) -> AgentPublic:
    """Create an agent (version 1)."""
    agent = await service.create_agent(
        db, who.tenant_id, body, state.registry, who.visible(state.models.names())
    )
    return service.to_public(agent)


@router.get("")
async def list_agents(
    db: DbDep, who: PrincipalDep, limit: Limit = 20, after: After = None
) -> AgentList:
    """The tenant's agents, newest first."""
    rows, more = await service.list_agents(db, who.tenant_id, limit, after)
    return AgentList(data=[service.to_public(a) for a in rows], has_more=more)


@router.get("/{name}")
async def get_agent(name: str, db: DbDep, who: PrincipalDep) -> AgentPublic:
    """One agent at its current version."""
    return service.to_public(await service.get_agent(db, who.tenant_id, name))


@router.put("/{name}")
async def update_agent(
    name: str, body: AgentUpdate, db: DbDep, who: PrincipalDep, state: StateDep
) -> AgentPublic:
    """Replace the spec (version + 1)."""
    agent = await service.update_agent(
        db, who.tenant_id, name, body, state.registry, who.visible(state.models.names())
    )
    return service.to_public(agent)


@router.get("/{name}/versions")
async def list_agent_versions(
    name: str, db: DbDep, who: PrincipalDep, limit: Limit = 20, after: After = None
) -> AgentVersionList:
    """The agent's versions, newest first (``after``: the last version number you have)."""
    agent, rows, more = await versions.list_versions(db, who.tenant_id, name, limit, after)
    return AgentVersionList(data=[versions.to_public(agent, r) for r in rows], has_more=more)


@router.get("/{name}/versions/{version}")
async def get_agent_version(
    name: str, version: str, db: DbDep, who: PrincipalDep
) -> AgentVersionPublic:
    """One version of the agent's spec."""
    return versions.to_public(*await versions.get_version(db, who.tenant_id, name, version))


@router.post("/{name}/rollback")
async def rollback_agent(
    name: str, body: AgentRollback, db: DbDep, who: PrincipalDep, state: StateDep
) -> AgentPublic:
    """Make version ``body.version``'s spec current again, as a new version (history kept)."""
    agent, _ = await versions.rollback(
        db,
        who.tenant_id,
        name,
        body.version,
        state.registry,
        who.visible(state.models.names()),
    )
    return service.to_public(agent)


@router.delete("/{name}", status_code=204)
async def delete_agent(name: str, db: DbDep, who: PrincipalDep, runs: RunsDep) -> Response:
    """Delete the agent and its sessions (their running runs are cancelled first)."""
    for run_id in await service.active_runs(db, who.tenant_id, name):
        await runs.cancel(run_id, CancelMode.CANCELLED)
    await service.delete_agent(db, who.tenant_id, name)
    return Response(status_code=204)
