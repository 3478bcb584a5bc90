"""A session's kernel is never lost silently: the gateway's kernel pool records which kernel
(replica and kernel name) each session's agent last ran code in (``session_kernels``), and a
cell that had to start a fresh kernel where the session had one before emits
``kernel.restarted`` on the run's event stream and tells the model in the tool's output.

Reasons: ``replica_changed`` (the session's previous kernel lived on another replica: it moved,
e.g. its replica died or the balancer's ring changed) or ``kernel_stopped`` (same replica; the
kernel was stopped: idle timeout, eviction, a crash or a cell past its timeout). Files in the
session's work dir survive only where the work dir is shared (docs/deploy.md).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.sandbox import CellResult, KernelPool, SandboxConfig
from app.runtime.events import RunChannel
from app.runtime.store.fleet import FleetStore
from app.schemas.vocab import EventType

if TYPE_CHECKING:
    from app.schemas.agents import AgentSpec

log = logging.getLogger("agentstation.kernels")

NOTE = (
    "Note: this session's Python kernel was restarted before this cell (variables, imports "
    "and functions defined in earlier turns are gone; define them again)."
)


@dataclass(frozen=True)
class _Turn:
    session_pk: str
    channel: RunChannel


_TURN: ContextVar[_Turn | None] = ContextVar("agentstation_kernel_turn", default=None)


@contextmanager
def kernel_turn(session_pk: str, channel: RunChannel) -> Iterator[None]:
    """Cells run within are the session's: a restart is recorded and reported on ``channel``."""
    token = _TURN.set(_Turn(session_pk, channel))
    try:
        yield
    finally:
        _TURN.reset(token)


class FleetKernelPool(KernelPool):
    """The gateway's kernel pool: ``KernelPool`` that records and reports kernel restarts."""

    def __init__(self, config: SandboxConfig, replica: str) -> None:
        super().__init__(config)
        self.replica = replica
        self.fleet: FleetStore | None = None  # set once the database is up (app/main.py)

    async def execute(
        self, session_key: str, code: str, *, agent: str = "default", timeout_s: float | None = None
    ) -> CellResult:
        result = await super().execute(session_key, code, agent=agent, timeout_s=timeout_s)
        turn = _TURN.get()
        if result.fresh and turn is not None and self.fleet is not None:
            owner = f"{self.replica}/{result.kernel}"
            before = await self.fleet.record_kernel(turn.session_pk, agent, owner)
            if before is not None:
                moved = before.split("/", 1)[0] != self.replica
                reason = "replica_changed" if moved else "kernel_stopped"
                await turn.channel.emit(
                    EventType.KERNEL_RESTARTED, {"agent": agent, "reason": reason}
                )
                result.notes.insert(0, NOTE)
        return result

    async def forget_session(self, session_pk: str) -> None:
        """The session's kernels were stopped on purpose (reset, delete): no restart to tell."""
        if self.fleet is not None:
            await self.fleet.forget_kernels(session_pk)


def kernel_agents(spec: AgentSpec) -> set[str]:
    """The kernel names (each IPython tool's ``agent``, "default" unless set) of a spec's
    sandboxed Python tools, its inline agents' included (the registry gives every tool whose
    name starts with ``IPython`` the gateway's pool; stored agents named by a spec are not
    followed: their kernels start lazily)."""
    found = {
        str(ref.config.get("agent", "default"))
        for ref in spec.tools
        if ref.name.startswith("IPython")
    }
    for _path, child in spec.children():
        if not isinstance(child, str):
            found |= kernel_agents(child)
    return found


def prestart_kernels(pool: Any, session_key: str, spec: AgentSpec) -> None:
    """Start a new session's kernels in the background (``KernelPool.prestart``: free slots
    only, never waited for here, a failure logged); nothing without a pool or a Python tool."""
    if pool is None:
        return
    try:
        for agent in kernel_agents(spec):
            pool.prestart(session_key, agent)
    except Exception:  # a kernel started ahead is an optimisation: the first cell starts one
        log.exception("starting the kernels of session %s ahead failed", session_key)
