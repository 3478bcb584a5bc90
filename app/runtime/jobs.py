"""The body of a run's task: wait for the session, run the turn, persist, report."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, cast

import sqlalchemy as sa

from agents.llms.base import Usage
from agents.memory import load_message
from agents.schema import AgentMessage
from app.db import raw
from app.db.base import utcnow
from app.db.models import Message, Run
from app.db.models import Session as SessionRow
from app.errors import database_unavailable, public_error
from app.ops.budget import STOP_REASON as BUDGET_STOP
from app.ops.budget import BudgetExceeded, RunBudget, budget_scope
from app.ops.budget_store import charge_tenant
from app.ops.logging import run_id_var
from app.runtime import pgturn
from app.runtime.approvals import Resumption, waiting_state
from app.runtime.budgets import BudgetFigures, read_figures
from app.runtime.events import Event, RunChannel
from app.runtime.locks import RunHold
from app.runtime.memory_cache import current, memory_nodes, plain_memories
from app.runtime.messages import dump_message
from app.runtime.reads import reading
from app.runtime.runner import (
    TurnResult,
    bump_memory_rev,
    load_state,
    merge_state,
    new_rows,
    resume_turn,
    run_turn,
    save_new_messages,
)
from app.schemas.agents import AgentSpec
from app.schemas.vocab import END_EVENT, RunStatus

if TYPE_CHECKING:
    from app.runtime.runs import RunManager

log = logging.getLogger(__name__)
RUNS = cast(sa.Table, Run.__table__)  # Core statements: no ORM bookkeeping for rows nobody holds

# Waits between attempts to store a run's end while the database is down (≈ 2 minutes).
FINISH_RETRY_S = (0.2, 0.5, 1.0, *([2.0] * 60))
# cancel mode -> (final status, whether completed messages are kept)
CANCEL_MODES: dict[str, tuple[RunStatus, bool]] = {
    "cancelled": (RunStatus.CANCELLED, False),
    "client_disconnected": (RunStatus.CANCELLED, False),
    "rollback": (RunStatus.CANCELLED, False),
    "interrupt": (RunStatus.INTERRUPTED, True),
    "shutdown": (RunStatus.INTERRUPTED, False),
}


@dataclass
class Job:
    """A run owned by this process."""

    run: Run  # kept up to date in memory: the final state is served without a re-read
    run_id: str
    tenant_id: str
    session_pk: str
    session_id: str
    agent_name: str
    spec: AgentSpec
    message: AgentMessage
    gen_params: dict[str, Any]
    channel: RunChannel
    queued: bool = False  # stored as ``queued``: marks itself running when it starts
    rev: int | None = None  # the session's memory_rev read at admission (None: read at start)
    budget: BudgetFigures | None = None  # read at submission (None: read at start)
    charge_later: Callable[[str, int], Awaitable[None]] | None = None  # see Submission
    held: RunHold | None = None  # PostgreSQL: the session's run lock, taken at admission
    tenant_limited: bool = True  # known at start: False when the tenant has no budget
    task: asyncio.Task[Any] | None = None  # its own, or the request's (``inline``)
    inline: bool = False  # run in the task of the request that waits for it (run_here)
    cancel_mode: str | None = None
    cancel_sent: bool = False  # an inline job's task was cancelled by RunManager.cancel
    started: bool = False  # holds the session (queued until then; for the queue-depth gauge)
    finishing: bool = False
    # A run going on after a person's decisions (POST /v1/runs/{id}/resume), None for a new one.
    resume: Resumption | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)

    @property
    def session_key(self) -> str:
        """The session id agents and kernels see: ``<tenant>:<session>``."""
        return f"{self.tenant_id}:{self.session_id}"


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


async def execute(manager: RunManager, job: Job) -> None:
    """Run ``job`` to a final status; never raises."""
    # The run's log lines carry its id; reset at the end, as an inline run shares its context
    # with the request that runs it.
    run_id_token = run_id_var.set(job.run_id)
    result = TurnResult()
    turn: Turn | None = None
    try:
        held, job.held = job.held, None
        async with manager.locks.running(job.session_pk, held) as hold:
            if job.cancel_mode is not None:
                raise asyncio.CancelledError  # cancelled while queued
            job.started = True
            turn = await _begin(manager, job, lambda: result.usage)
            with budget_scope(turn.budget):  # checked before every model call of the turn
                if job.resume is None:
                    await run_turn(
                        turn.agent, job.message, job.session_key, job.gen_params, job.channel,
                        result,
                    )  # fmt: skip
                else:
                    await resume_turn(
                        turn.agent, job.resume, job.session_key, job.gen_params, job.channel,
                        result,
                    )  # fmt: skip
            job.finishing = True
            # "length": the answer's model call hit its max tokens (OpenAI's finish_reason).
            status, end = (
                RunStatus.COMPLETED,
                "length" if result.usage.last_finish == "length" else "end",
            )
            # Stopped before tool calls a person must decide about: the run waits, stored.
            job.run.__dict__["pending"] = waiting_state(turn.agent, job.session_key, job.spec)
            if job.run.pending is not None:
                status, end = RunStatus.REQUIRES_ACTION, "requires_action"
            try:
                await _finish(manager, job, status, end, result, turn, hold=hold)
            except Exception as exc:
                if not (hold.broken and database_unavailable(exc)):
                    raise
                # The lock's connection was lost (nothing committed there): store the end on a
                # pooled connection, retried while the database is unreachable.
                await _finish_safely(manager, job, status, end, result, turn)
    except BudgetExceeded:
        # Stopped at a model-call boundary: keep what the turn produced so far.
        job.finishing = True
        await _finish_safely(manager, job, RunStatus.COMPLETED, BUDGET_STOP, result, turn)
    except asyncio.CancelledError:
        mode = job.cancel_mode or "shutdown"
        status, keep = CANCEL_MODES.get(mode, (RunStatus.CANCELLED, False))
        await _finish_safely(manager, job, status, mode, result, turn if keep else None)
    except Exception as exc:
        # The detail (it may hold SQL and its parameters, paths, other tenants' ids) goes to
        # the log only; the run's error says what a client may know, with the request id.
        log.exception("run %s failed", job.run_id)
        error = public_error(exc)
        await _finish_safely(manager, job, RunStatus.FAILED, "error", result, None, error)
    finally:
        await _guard(job.channel.close())
        job.done.set()
        manager.forget(job)
        run_id_var.reset(run_id_token)


async def _begin(manager: RunManager, job: Job, usage: Callable[[], Usage]) -> Turn:
    """Build the agent and load the session's memory: from the in-process cache when the
    stored revision matches (no rows read, nothing re-validated), else from the rows."""
    agent = manager.build_agent(job.spec, job.agent_name)
    nodes = memory_nodes(agent)
    memories = plain_memories(nodes, job.session_key) if nodes is not None else None
    rev, figures = job.rev, job.budget
    stored: dict[str, list[dict[str, Any]]] | None = None
    if job.queued or rev is None:
        # It waited for the session: mark it running and read what may have changed since.
        async with manager.writes.hold(), manager.sessionmaker() as db, db.begin():
            started = utcnow()
            if job.queued:
                await db.execute(
                    sa.update(RUNS)
                    .where(RUNS.c.id == job.run_id)
                    .values(status=RunStatus.RUNNING, started_at=started)
                )
            rev = int(
                await db.scalar(
                    sa.select(SessionRow.memory_rev).where(SessionRow.pk == job.session_pk)
                )
                or 0
            )
            figures = await read_figures(db, job.tenant_id, job.session_pk, job.spec.budget)
            cached = manager.memory.get(job.session_pk, rev) if memories else None
            if cached is None:
                stored = await load_state(db, job.session_pk)
        if job.queued:
            job.run.status, job.run.started_at = RunStatus.RUNNING, started
    else:
        cached = manager.memory.get(job.session_pk, rev) if memories else None
        if cached is None or figures is None:
            async with reading(manager.engine, manager.sessionmaker) as db:
                if cached is None:
                    stored = await load_state(db, job.session_pk)
                if figures is None:
                    figures = await read_figures(db, job.tenant_id, job.session_pk, job.spec.budget)
    assert figures is not None
    job.tenant_limited = figures.tenant_limit is not None
    budget = figures.budget(usage)
    if memories is not None and nodes is not None:
        if cached is None or set(cached) != set(memories):
            assert stored is not None or cached is not None
            source = stored if stored is not None else await _reload(manager, job)
            cached = {key: [load_message(m) for m in source.get(key, [])] for key in memories}
        for key, memory in memories.items():
            memory.memory = list(cached[key])
        return Turn(agent, nodes, {k: len(v) for k, v in cached.items()}, rev, budget)
    # An agent whose memory this module cannot set directly: the lagent API.
    if stored is None:
        stored = await _reload(manager, job)
    if stored:
        agent.load_state_dict(
            merge_state(agent.state_dict(job.session_key), stored), session_id=job.session_key
        )
    return Turn(agent, None, {k: len(v) for k, v in stored.items()}, rev, budget)


async def _reload(manager: RunManager, job: Job) -> dict[str, list[dict[str, Any]]]:
    async with reading(manager.engine, manager.sessionmaker) as db:
        return await load_state(db, job.session_pk)


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


async def _finish(
    manager: RunManager,
    job: Job,
    status: RunStatus,
    stop_reason: str,
    result: TurnResult,
    turn: Turn | None,
    error: dict[str, Any] | None = None,
    *,
    hold: RunHold | None = None,
) -> None:
    """One transaction: the new messages (of ``turn``, if kept), the final status, the tenant's
    charge and the run's unsaved events with the terminal one; then announce it.

    On PostgreSQL it is one statement, on the run lock's connection (``hold``) when it has one;
    the lock is released after (``SessionLocks.running``), so the next run sees all of it.
    """
    manager.memory.drop(job.session_pk)  # re-added below only after a clean, stored turn
    if job.resume is not None and turn is None:
        # A resumed run that keeps nothing: what it stored when it paused goes too.
        await _drop_paused_messages(manager, job)
    run = job.run
    waits = status == RunStatus.REQUIRES_ACTION
    base_prompt, base_completion = job.resume.tokens if job.resume is not None else (0, 0)
    ended = utcnow()
    # A transient Run (RunManager._new_run), written with Core or raw SQL: set directly, no
    # ORM attribute events.
    run.__dict__.update(
        status=status,
        stop_reason=stop_reason,
        error=error,
        output=dump_message(result.final) if result.final is not None else None,
        prompt_tokens=base_prompt + result.usage.prompt_tokens,
        completion_tokens=base_completion + result.usage.completion_tokens,
        finished_at=None if waits else ended,
        pending=run.__dict__.get("pending") if waits else None,
    )
    public = manager.public(run)
    end_event = END_EVENT[status]
    terminal: tuple[str, dict[str, Any]] = (end_event, {"run": public})
    if status == RunStatus.FAILED:
        terminal[1]["error"] = error
    if waits and run.pending is not None:
        terminal[1]["tool_calls"] = run.pending["tool_calls"]
    # A waiting run stores every event it sent: its last id is the last one it may have sent.
    seq_reserved = len(job.channel.events) + 1 if waits else None
    after = turn.after(job.session_key) if turn is not None else None
    await job.channel.stop_flushing()
    # A tenant with a budget is charged in this transaction (every replica enforces it from
    # the stored counter); one without gets its tokens counted in memory and batched.
    later = job.charge_later if not job.tenant_limited else None
    charge = result.usage.total_tokens if later is None else 0
    if manager.locks.postgres:
        changed, event = await _store_end_pg(
            manager, job, turn, after, terminal, charge, hold, ended, seq_reserved
        )
    else:
        async with manager.writes.hold(), manager.sessionmaker() as db, db.begin():
            changed = False
            if turn is not None and after is not None:
                changed = await save_new_messages(
                    db, job.session_pk, job.run_id, turn.before, after
                )
            await db.execute(
                sa.update(RUNS)
                .where(RUNS.c.id == job.run_id)
                .values(
                    status=run.status,
                    stop_reason=run.stop_reason,
                    output=run.output,
                    error=run.error,
                    prompt_tokens=run.prompt_tokens,
                    completion_tokens=run.completion_tokens,
                    finished_at=run.finished_at,
                    pending=run.pending,
                    **({"seq_reserved": seq_reserved} if seq_reserved is not None else {}),
                )
            )
            if charge:
                await charge_tenant(db, job.tenant_id, charge)
            event = await job.channel.save_final(db, *terminal)
    clean = (status == RunStatus.COMPLETED and stop_reason in ("end", "length")) or waits
    if clean and turn is not None and turn.nodes is not None and after is not None:
        manager.memory.put(job.session_pk, turn.rev + (1 if changed else 0), after)
    if later is not None:
        try:
            await later(job.tenant_id, result.usage.total_tokens)
        except Exception:  # the run is stored: a lost count must not turn it into a failure
            log.exception("counting run %s's tokens for its tenant failed", job.run_id)
    manager.finished[job.run_id] = run
    manager.finished_public[job.run_id] = public
    if manager.on_finished is not None:
        manager.on_finished(run)
    await job.channel.published(event)
    job.done.set()  # stored: the answer need not wait for the session's lock release


async def _drop_paused_messages(manager: RunManager, job: Job) -> None:
    """Delete the messages the run stored when it paused (its memory goes back to before it)."""
    async with manager.writes.hold(), manager.sessionmaker() as db, db.begin():
        dropped = await db.execute(sa.delete(Message).where(Message.run_id == job.run_id))
        if getattr(dropped, "rowcount", 0):
            await bump_memory_rev(db, job.session_pk)


async def _store_end_pg(
    manager: RunManager,
    job: Job,
    turn: Turn | None,
    after: dict[str, Any] | None,
    terminal: tuple[str, dict[str, Any]],
    charge: int,
    hold: RunHold | None,
    ended: datetime,
    seq_reserved: int | None,
) -> tuple[bool, Event]:
    """PostgreSQL: the run's end as one statement on the run lock's connection (or, without
    one, a pooled connection); returns whether the memory changed, and the terminal event."""
    rows: list[dict[str, Any]] = []
    rewrite: list[str] = []
    if turn is not None and after is not None:
        rows, rewrite = new_rows(job.session_pk, job.run_id, turn.before, after)
    messages = [{"key": r["key"], "index": r["index"], "data": r["data"]} for r in rows]
    event, events = job.channel.final_rows(*terminal)
    args = (job.run, messages, rewrite, events, charge, ended)
    if hold is not None and hold.pg is not None and not hold.broken:
        try:
            # Its commit also releases the session's run lock (no statement of its own).
            held = await pgturn.store_end(
                hold.pg,
                *args,
                unlock_key=hold.key if hold.locked else None,
                seq_reserved=seq_reserved,
            )
        except BaseException:
            hold.broken = True  # its lock is released by discarding the connection
            raise
        if hold.locked:
            if not held:
                log.warning("run %s: the session's run lock was not held at its end", job.run_id)
            hold.locked = False  # released: the connection goes back to the pool as is
    else:
        async with raw.pooled(manager.engine) as pg:
            await pgturn.store_end(pg, *args, seq_reserved=seq_reserved)
    return bool(rows or rewrite), event


def input_message(raw: Any) -> AgentMessage:
    """The run's input as an AgentMessage (strings come from ``user``)."""
    if isinstance(raw, dict):
        # Drop unset optional fields, but keep ``content`` (a null content is still content).
        raw = {k: v for k, v in raw.items() if v is not None or k == "content"}
        raw.pop("stream_state", None)
    return load_message(raw)
