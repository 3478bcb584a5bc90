"""The body of a run's task: wait for the session, run the turn, persist, report."""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from agents.schema import AgentMessage
from app.db.base import utcnow
from app.db.models import Run
from app.engines.base import EngineError
from app.errors import database_unavailable
from app.ops.budget import STOP_REASON as BUDGET_STOP
from app.ops.budget import BudgetExceeded, budget_scope
from app.ops.budget_store import charge_tenant, load_run_budget
from app.ops.logging import run_id_var
from app.runtime.events import RunChannel
from app.runtime.messages import dump_message, load_message
from app.runtime.runner import TurnResult, load_state, merge_state, run_turn, save_new_messages
from app.schemas.agents import AgentSpec

if TYPE_CHECKING:
    from app.runtime.runs import RunManager

log = logging.getLogger(__name__)

# Waits between attempts to store a run's end while the database is down (≈ 2 minutes).
FINISH_RETRY_S = (0.2, 0.5, 1.0, *([2.0] * 60))
# cancel mode -> (final status, whether completed messages are kept)
CANCEL_MODES: dict[str, tuple[str, bool]] = {
    "cancelled": ("cancelled", False),
    "client_disconnected": ("cancelled", False),
    "rollback": ("cancelled", False),
    "interrupt": ("interrupted", True),
    "shutdown": ("interrupted", False),
}


@dataclass
class Job:
    """A run owned by this process."""

    run_id: str
    tenant_id: str
    session_pk: str
    session_id: str
    agent_name: str
    spec: AgentSpec
    message: AgentMessage
    gen_params: dict[str, Any]
    channel: RunChannel
    task: asyncio.Task[None] | None = None
    cancel_mode: str | None = None
    started: bool = False  # holds the session (queued until then; for the queue-depth gauge)
    finishing: bool = False
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def session_key(self) -> str:
        """The session id agents and kernels see: ``<tenant>:<session>``."""
        return f"{self.tenant_id}:{self.session_id}"


async def execute(manager: RunManager, job: Job) -> None:
    """Run ``job`` to a final status; never raises."""
    run_id_var.set(job.run_id)  # this task's log lines carry the run id (its own context)
    result = TurnResult()
    before: dict[str, list[dict[str, Any]]] = {}
    agent: Any = None
    try:
        async with manager.locks.running(job.session_pk):
            if job.cancel_mode is not None:
                raise asyncio.CancelledError  # cancelled while queued
            job.started = True
            await _set(manager, job.run_id, status="running", started_at=utcnow())
            async with manager.sessionmaker() as db:
                before = await load_state(db, job.session_pk)
                budget = await load_run_budget(
                    db, job.tenant_id, job.session_pk, job.spec.budget, lambda: result.usage
                )
            agent = manager.build_agent(job.spec, job.agent_name)
            if before:
                agent.load_state_dict(
                    merge_state(agent.state_dict(job.session_key), before),
                    session_id=job.session_key,
                )
            with budget_scope(budget):  # checked before every model call of the turn
                await run_turn(
                    agent, job.message, job.session_key, job.gen_params, job.channel, result
                )
            job.finishing = True
            await _finish(
                manager, job, "completed", "end", result, before, agent.state_dict(job.session_key)
            )
    except BudgetExceeded:
        # Stopped at a model-call boundary: keep what the turn produced so far.
        job.finishing = True
        after = agent.state_dict(job.session_key) if agent is not None else None
        await _finish_safely(manager, job, "completed", BUDGET_STOP, result, before, after)
    except asyncio.CancelledError:
        mode = job.cancel_mode or "shutdown"
        status, keep = CANCEL_MODES.get(mode, ("cancelled", False))
        after = agent.state_dict(job.session_key) if keep and agent is not None else None
        await _finish_safely(manager, job, status, mode, result, before, after)
    except Exception as exc:
        log.exception("run %s failed", job.run_id)
        error = {"message": str(exc) or type(exc).__name__, "type": type(exc).__name__}
        if isinstance(exc, EngineError):
            error["code"] = exc.code
        await _finish_safely(manager, job, "failed", "error", result, before, None, error)
    finally:
        await _guard(job.channel.close())
        job.done.set()
        manager.forget(job)


async def _finish_safely(manager: RunManager, job: Job, *args: Any) -> None:
    """``_finish``, retried while the database is unreachable (else the run stays active
    and its session busy after the outage); other errors are logged."""
    for delay in FINISH_RETRY_S:
        try:
            await _finish(manager, job, *args)
            return
        except Exception as exc:
            if not database_unavailable(exc):
                log.exception("finishing a run failed")
                return
            log.warning("database unavailable while finishing run %s; retrying", job.run_id)
            await asyncio.sleep(delay)
    log.error("gave up finishing run %s: the database stayed unavailable", job.run_id)


async def _guard(coro: Any) -> None:
    try:
        await coro
    except Exception:
        log.exception("finishing a run failed")


async def _set(manager: RunManager, run_id: str, **values: Any) -> None:
    async with manager.sessionmaker() as db, db.begin():
        await db.execute(sa.update(Run).where(Run.id == run_id).values(**values))


async def _finish(
    manager: RunManager,
    job: Job,
    status: str,
    stop_reason: str,
    result: TurnResult,
    before: dict[str, list[dict[str, Any]]],
    after: dict[str, Any] | None,
    error: dict[str, Any] | None = None,
) -> None:
    """Store the new messages and the final status in one transaction, then announce it."""
    output = dump_message(result.final) if result.final is not None else None
    async with manager.sessionmaker() as db, db.begin():
        if after is not None:
            await save_new_messages(db, job.session_pk, job.run_id, before, after)
        run = await db.get(Run, job.run_id)
        assert run is not None
        run.status, run.stop_reason, run.output, run.error = status, stop_reason, output, error
        run.prompt_tokens = result.usage.prompt_tokens
        run.completion_tokens = result.usage.completion_tokens
        run.finished_at = utcnow()
        await charge_tenant(db, job.tenant_id, result.usage.total_tokens)
    if manager.on_finished is not None:
        manager.on_finished(run)
    public = manager.public(run)
    if status == "completed":
        await job.channel.emit("run.completed", {"run": public}, durable=True)
    elif status == "failed":
        await job.channel.emit("run.failed", {"run": public, "error": error}, durable=True)
    else:
        await job.channel.emit("run.cancelled", {"run": public}, durable=True)


def input_message(raw: Any) -> AgentMessage:
    """The run's input as an AgentMessage (strings come from ``user``)."""
    if isinstance(raw, dict):
        # Drop unset optional fields, but keep ``content`` (a null content is still content).
        raw = {k: v for k, v in raw.items() if v is not None or k == "content"}
        raw.pop("stream_state", None)
    return load_message(raw)
