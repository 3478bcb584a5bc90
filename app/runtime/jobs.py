"""What a run of this process is made of: its ``Job``, its started ``Turn``, and the collaborators
its task uses (``JobDeps``); the task itself is app/runtime/execution.py."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from agents.llms.base import CallMeter
from agents.memory import Memory, load_message
from agents.schema import AgentMessage
from app.db.models import Run
from app.ops.budget import RunBudget
from app.runtime.approvals import Resumption
from app.runtime.budgets import BudgetFigures
from app.runtime.events import RunChannel
from app.runtime.memory_cache import MemoryCache, current, memory_nodes, plain_memories
from app.runtime.registry import ServableAgent
from app.runtime.store import RunStore, TurnLease
from app.schemas.agents import AgentSpec
from app.schemas.vocab import CancelMode


@dataclass
class Job:
    """A run owned by this process (its ids are the run's: ``run_id``, ``session_pk``, ...)."""

    run: Run  # kept up to date in memory: the final state is served without a re-read
    spec: AgentSpec
    message: AgentMessage
    gen_params: dict[str, Any]
    channel: RunChannel
    rev: int | None = None  # the session's memory_rev read at admission (None: read at start)
    budget: BudgetFigures | None = None  # read at submission (None: read at start)
    charge_later: Callable[[str, int], Awaitable[None]] | None = None  # see Submission
    instructions: str | None = None  # a system message for this turn only (instructions_scope)
    # The turn's lease (PostgreSQL: the session's run lock when its admission took it); the
    # run's task takes it over (``execution.execute``).
    lease: TurnLease = field(default_factory=TurnLease)
    tenant_limited: bool = True  # known at start: False when the tenant has no budget
    metered: bool = False  # its calls were charged one by one (``JobDeps.meter``): not at its end
    task: asyncio.Task[Any] | None = None  # its own, or the request's (``inline``)
    inline: bool = False  # run in the task of the request that waits for it (run_here)
    cancel_mode: CancelMode | None = None
    cancel_sent: bool = False  # an inline job's task was cancelled by RunManager.cancel
    started: bool = False  # holds the session (queued until then; for the queue-depth gauge)
    finishing: bool = False
    # A run going on after a person's decisions (POST /v1/runs/{id}/resume), None for a new one.
    resume: Resumption | None = None
    # Its agent, built while its admission was in flight (None: built when its turn begins).
    prepared: Prepared | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    # A run's ids never change: each read once from the run, then an instance attribute
    # (``cached_property``): they are read ~30 times per turn, each a property call and an ORM
    # attribute read before (issue 25).
    @cached_property
    def run_id(self) -> str:
        return self.run.id

    @cached_property
    def tenant_id(self) -> str:
        return self.run.tenant_id

    @cached_property
    def session_pk(self) -> str:
        return self.run.session_pk

    @cached_property
    def session_id(self) -> str:
        return self.run.session_id

    @cached_property
    def agent_name(self) -> str:
        return self.run.agent

    @cached_property
    def session_key(self) -> str:
        """The session id agents and kernels see: ``<tenant>:<session>``."""
        return f"{self.tenant_id}:{self.session_id}"


@dataclass
class Prepared:
    """A turn's agent before its memory is loaded: the agent, its memory owners (``nodes``,
    None: via state_dict/load_state_dict) and the session's fresh, empty memories to fill
    (``memories``, None: not plain lists). Building it stores and starts nothing."""

    agent: Any
    nodes: dict[str, Any] | None
    memories: dict[str, Memory] | None


def prepare(
    build_agent: Callable[[AgentSpec, str | None], ServableAgent],
    spec: AgentSpec,
    agent_name: str,
    session_key: str,
) -> Prepared:
    """Build the agent of a turn and its session's empty memories."""
    agent = build_agent(spec, agent_name)
    nodes = memory_nodes(agent)
    memories = plain_memories(nodes, session_key) if nodes is not None else None
    return Prepared(agent, nodes, memories)


@dataclass
class JobDeps:
    """What a job's task uses of this process (given explicitly: no manager)."""

    store: RunStore
    build_agent: Callable[[AgentSpec, str | None], ServableAgent]
    memory: MemoryCache
    ended: Callable[[Run, dict[str, Any]], None]  # its end is stored (run, its API shape)
    forget: Callable[[Job], None]  # its task is over
    # A tenant's calls counted in the database, call by call (app.ops.token_holds); None: a
    # tenant's tokens are charged at the run's end.
    meter: Callable[[str], CallMeter] | None = None


@dataclass
class Turn:
    """A started turn: the agent with its memory loaded, and what was stored before."""

    agent: Any
    nodes: dict[str, Any] | None  # key -> memory owner; None: via state_dict/load_state_dict
    before: dict[str, int]  # stored entries per key
    rev: int  # the session's memory_rev the memory was loaded at
    budget: RunBudget

    def after(self, session_key: str) -> dict[str, Any]:
        """The memory now (only entries past ``before`` are written)."""
        if self.nodes is not None:
            return current(self.nodes, session_key)
        state: dict[str, Any] = self.agent.state_dict(session_key)
        return state


def input_message(raw: Any) -> AgentMessage:
    """The run's input as an AgentMessage (strings come from ``user``)."""
    if isinstance(raw, dict):
        # Drop unset optional fields, but keep ``content`` (a null content is still content).
        raw = {k: v for k, v in raw.items() if v is not None or k == "content"}
        raw.pop("stream_state", None)
    return load_message(raw)
