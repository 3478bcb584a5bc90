"""What the lifespan builds and requests use (``app.state.agentstation``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agents.agent import BaseAgent
from app.cache import TTLCache
from app.models.registry import ModelRegistry
from app.ops.drain import Drain
from app.ops.tenant_usage import TenantUsage
from app.runtime.liveness import Liveness
from app.runtime.registry import BuildContext, Registry, ServableAgent
from app.runtime.runs import RunManager
from app.runtime.store import Found
from app.schemas.agents import AgentSpec
from app.services.agent_directory import AgentDirectory, AgentInfo
from app.services.auth import Authenticator
from app.settings import Settings


@dataclass
class AppState:
    """Process-wide resources, created in the lifespan and closed with it."""

    settings: Settings
    engine: AsyncEngine
    sessionmaker: async_sessionmaker[AsyncSession]
    models: ModelRegistry
    registry: Registry
    auth: Authenticator
    agents: AgentDirectory  # each tenant's agents by name, cached (chat, /v1/models)
    tenant_usage: TenantUsage  # tenant budgets of stateless chat, usage batched
    # Sessions looked up for turns (app.services.turns._look_up); (tenant, session id) -> Found.
    turn_sessions: TTLCache[tuple[str, str], Found]
    runs: RunManager | None = None
    kernel_pool: Any | None = None
    replica: str = ""  # this replica's id (app/runtime/liveness.py)
    drain: Drain = field(default_factory=Drain)  # SIGTERM: no new turns, /readyz 503
    liveness: Liveness | None = None  # heartbeat and the sweep of dead replicas' runs
    extras: dict[str, Any] = field(default_factory=dict)

    def build_agent(self, spec: AgentSpec, name: str | None = None) -> ServableAgent:
        """A fresh agent object for ``spec`` with this process's models and kernels."""
        llms = {name: h.llm for name, h in self.models.handles.items()}
        ctx = BuildContext(llms=llms, kernel_pool=self.kernel_pool, name=name)
        return self.registry.build(spec, ctx)

    def stateless_agent(self, info: AgentInfo) -> ServableAgent:
        """The agent a stateless request of ``info`` runs in.

        A kind the registry marks shared is built once per directory entry (tenant, name,
        version) and serves concurrent requests, each under a session id of its own whose
        memory the caller drops afterwards (so it must be a ``BaseAgent``); other kinds are
        built per request. The shared object is rebuilt if the model's LLM object changed.
        """
        spec = info.spec
        if not self.registry.shared(spec):
            return self.build_agent(spec, info.name)
        handle = self.models.get(spec.model or "")
        llm = handle.llm if handle is not None else None
        built = info.built
        if built is None or built[0] is not llm:
            agent = self.build_agent(spec, info.name)
            if not isinstance(agent, BaseAgent):  # its sessions' memory could not be dropped
                return agent
            built = info.built = (llm, agent)
        shared: ServableAgent = built[1]
        return shared

    @property
    def run_manager(self) -> RunManager:
        """The run manager (always set once the lifespan started)."""
        assert self.runs is not None
        return self.runs
