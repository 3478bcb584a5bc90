"""Stored agents named inside other agents' specs (``sub_agents``, a task's agents).

A name is checked when the spec is stored (it must exist in the tenant and never lead back to
the agent itself) and resolved when a turn runs: to the version that was current when the
session started (the latest version created at or before the session's ``created_at``, so a
session's participants are pinned like its own agent), or to the current version for a
stateless request.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.models import Agent, AgentVersion
from app.errors import ValidationFailed
from app.runtime.store.reads import reading
from app.schemas.agents import AgentSpec

MAX_DEPTH = 8  # agents referring to agents referring to ...

# The codes of a stored spec that can no longer be built (an agent it names was deleted).
UNBUILDABLE = frozenset({"unknown_agent", "agent_depth"})


def _refs(spec: AgentSpec, prefix: str = "spec") -> list[tuple[str, str]]:
    """(parameter path, name) of every reference in ``spec`` and its inline agents."""
    found: list[tuple[str, str]] = []
    for param, child in spec.children(prefix):
        if isinstance(child, str):
            found.append((param, child))
        else:
            found += _refs(child, param)
    return found


async def _specs(
    db: AsyncSession, tenant_id: str, names: set[str], at: datetime | None
) -> dict[str, AgentSpec]:
    """The specs of the named agents: current, or the version current at ``at``."""
    stmt = (
        sa.select(Agent.name, AgentVersion.version, AgentVersion.spec)
        .join(AgentVersion, AgentVersion.agent_id == Agent.id)
        .where(Agent.tenant_id == tenant_id, Agent.name.in_(names))
    )
    if at is None:
        stmt = stmt.where(AgentVersion.version == Agent.version)
    else:
        stmt = stmt.where(AgentVersion.created_at <= at)
    best: dict[str, tuple[int, Any]] = {}
    for name, version, raw in await db.execute(stmt):
        if name not in best or version > best[name][0]:
            best[name] = (version, raw)
    return {name: AgentSpec.model_validate(raw) for name, (_, raw) in best.items()}


async def check_refs(db: AsyncSession, tenant_id: str, name: str, spec: AgentSpec) -> None:
    """422 unless every named agent exists in the tenant and none leads back to ``name``."""
    frontier = _refs(spec)
    seen: set[str] = set()
    for _ in range(MAX_DEPTH):
        if not frontier:
            return
        for param, ref in frontier:
            if ref == name:
                raise ValidationFailed(
                    f"agent {name!r} would run itself through {ref!r}",
                    param=param,
                    code="agent_cycle",
                )
        wanted = {ref for _, ref in frontier} - seen
        found = await _specs(db, tenant_id, wanted, None)
        for param, ref in frontier:
            if ref in wanted and ref not in found:
                raise ValidationFailed(f"unknown agent {ref!r}", param=param, code="unknown_agent")
        seen |= wanted
        first = {ref: param for param, ref in reversed(frontier)}
        frontier = [(first[ref], sub) for ref in wanted for _, sub in _refs(found[ref])]
    raise ValidationFailed(
        f"agents refer to agents more than {MAX_DEPTH} levels deep",
        param="spec",
        code="agent_depth",
    )


async def resolve_refs(
    db: AsyncSession, tenant_id: str, spec: AgentSpec, at: datetime | None, depth: int = 0
) -> AgentSpec:
    """``spec`` with every named agent replaced by its pinned spec (itself resolved)."""
    names = {ref for _, ref in _refs(spec)}
    if not names:
        return spec
    if depth >= MAX_DEPTH:
        raise ValidationFailed("agents refer to agents too deeply", code="agent_depth")
    found = await _specs(db, tenant_id, names, at)
    missing = sorted(names - set(found))
    if missing:
        raise ValidationFailed(
            f"agent {missing[0]!r} (a participant of this agent) no longer exists",
            param="agent",
            code="unknown_agent",
        )
    resolved = {
        ref: await resolve_refs(db, tenant_id, sub, at, depth + 1) for ref, sub in found.items()
    }
    return _substitute(spec, resolved)


def _substitute(spec: AgentSpec, resolved: dict[str, AgentSpec]) -> AgentSpec:
    def one(child: AgentSpec | str) -> AgentSpec:
        return resolved[child] if isinstance(child, str) else _substitute(child, resolved)

    tasks = [
        t.model_copy(
            update={
                "agent": one(t.agent),
                "name": t.name or (t.agent.replace(".", "_") if isinstance(t.agent, str) else None),
            }
        )
        for t in spec.sub_tasks or []
    ]
    return spec.model_copy(
        update={
            "sub_agents": {key: one(sub) for key, sub in spec.sub_agents.items()},
            "agent": None if spec.agent is None else one(spec.agent),
            "sub_tasks": tasks if spec.sub_tasks is not None else None,
        }
    )


async def pinned_spec(
    engine: AsyncEngine,
    sessionmaker: async_sessionmaker[AsyncSession],
    tenant_id: str,
    spec: AgentSpec,
    at: datetime | None,
) -> AgentSpec:
    """``resolve_refs`` in a short read-only session (no query when nothing is named)."""
    if not spec.references():
        return spec
    async with reading(engine, sessionmaker) as db:
        return await resolve_refs(db, tenant_id, spec, at)
