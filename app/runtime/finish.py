"""A run's end: its new messages, final status, tenant charge and last events, written by the
run store in one transaction (on PostgreSQL one statement, on the run lock's connection),
then announced."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from app.db.base import utcnow
from app.errors import database_unavailable
from app.runtime.jobs import Job, JobDeps, Turn
from app.runtime.messages import dump_message
from app.runtime.public import run_public
from app.runtime.runner import TurnResult
from app.runtime.store import RunEnd, TurnLease
from app.runtime.store.rows import new_rows
from app.schemas.vocab import END_EVENT, EventType, RunStatus

log = logging.getLogger(__name__)

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
    lease: TurnLease | None = None,
) -> None:
    """One transaction: the new messages (of ``turn``, if kept), the final status, the tenant's
    charge and the run's unsaved events with the terminal one; then announce it.

    On PostgreSQL it is one statement, on the run lock's connection (``lease``) when it has
    one, whose commit releases the lock, so the next run sees all of it.
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
    terminal: tuple[EventType, dict[str, Any]] = (end_event, {"run": public})
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
    # A metered run's calls were charged one by one (app.ops.token_holds).
    later = job.charge_later if not job.tenant_limited else None
    charge = result.usage.total_tokens if later is None and not job.metered else 0
    rows: list[dict[str, Any]] = []
    rewrite: list[str] = []
    if turn is not None and after is not None:
        rows, rewrite = new_rows(job.session_pk, job.run_id, turn.before, after)
    event, events = job.channel.final_rows(*terminal)
    end = RunEnd(run, rows, rewrite, events, charge, ended, seq_reserved)
    await deps.store.store_end(lease, end)
    changed = bool(rows or rewrite)
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
    await deps.store.drop_paused(job.run_id, job.session_pk)
