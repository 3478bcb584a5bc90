"""A run's end: its new messages, final status, tenant charge and last events in one
transaction (on PostgreSQL one statement, on the run lock's connection), then announced."""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa

from app.db import raw
from app.db.base import utcnow
from app.db.models import Message, Run
from app.errors import database_unavailable
from app.ops.budget_store import charge_tenant
from app.runtime import pgturn
from app.runtime.events import Event
from app.runtime.jobs import Job, JobDeps, Turn
from app.runtime.locks import RunHold
from app.runtime.messages import dump_message
from app.runtime.public import run_public
from app.runtime.runner import TurnResult, bump_memory_rev, new_rows, save_new_messages
from app.schemas.vocab import END_EVENT, RunStatus

log = logging.getLogger(__name__)
RUNS = cast(sa.Table, Run.__table__)  # Core statements: no ORM bookkeeping for rows nobody holds

# Waits between attempts to store a run's end while the database is down (≈ 2 minutes).
FINISH_RETRY_S = (0.2, 0.5, 1.0, *([2.0] * 60))


async def finish_safely(deps: JobDeps, job: Job, *args: Any) -> None:
    """``finish``, retried while the database is unreachable (else the run stays active
    and its session busy after the outage); other errors are logged."""
    for delay in FINISH_RETRY_S:
        try:
            await finish(deps, job, *args)
            return
        except Exception as exc:
            if not database_unavailable(exc):
                log.exception("finishing a run failed")
                return
            log.warning("database unavailable while finishing run %s; retrying", job.run_id)
            await asyncio.sleep(delay)
    log.error("gave up finishing run %s: the database stayed unavailable", job.run_id)


async def guard(coro: Any) -> None:
    """Await ``coro``, logging (not raising) its error."""
    try:
        await coro
    except Exception:
        log.exception("finishing a run failed")


async def finish(
    deps: JobDeps,
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
    deps.memory.drop(job.session_pk)  # re-added below only after a clean, stored turn
    if job.resume is not None and turn is None:
        # A resumed run that keeps nothing: what it stored when it paused goes too.
        await _drop_paused_messages(deps, job)
    run = job.run
    waits = status == RunStatus.REQUIRES_ACTION
    base_prompt, base_completion = job.resume.tokens if job.resume is not None else (0, 0)
    ended = utcnow()
    # A transient Run (admission.new_run), written with Core or raw SQL: set directly, no
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
    public = run_public(run)
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
    if deps.locks.postgres:
        changed, event = await _store_end_pg(
            deps, job, turn, after, terminal, charge, hold, ended, seq_reserved
        )
    else:
        async with deps.writes.hold(), deps.sessionmaker() as db, db.begin():
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
        deps.memory.put(job.session_pk, turn.rev + (1 if changed else 0), after)
    if later is not None:
        try:
            await later(job.tenant_id, result.usage.total_tokens)
        except Exception:  # the run is stored: a lost count must not turn it into a failure
            log.exception("counting run %s's tokens for its tenant failed", job.run_id)
    deps.ended(run, public)
    await job.channel.published(event)
    job.done.set()  # stored: the answer need not wait for the session's lock release


async def _drop_paused_messages(deps: JobDeps, job: Job) -> None:
    """Delete the messages the run stored when it paused (its memory goes back to before it)."""
    async with deps.writes.hold(), deps.sessionmaker() as db, db.begin():
        dropped = await db.execute(sa.delete(Message).where(Message.run_id == job.run_id))
        if getattr(dropped, "rowcount", 0):
            await bump_memory_rev(db, job.session_pk)


async def _store_end_pg(
    deps: JobDeps,
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
        async with raw.pooled(deps.engine) as pg:
            await pgturn.store_end(pg, *args, seq_reserved=seq_reserved)
    return bool(rows or rewrite), event
