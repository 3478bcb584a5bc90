"""The body of a run's task: wait for the session, start the turn, run it, store its end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from agents.llms.base import Usage, instructions_scope
from agents.llms.upstreams import route_key
from agents.memory import load_message
from app.errors import database_unavailable, public_error
from app.ops.budget import STOP_REASON as BUDGET_STOP
from app.ops.budget import BudgetExceeded, budget_scope
from app.ops.logging import run_id_var
from app.outbound import OutboundRefused
from app.runtime.approvals import waiting_state
from app.runtime.finish import finish, finish_safely, guard
from app.runtime.jobs import Job, JobDeps, Turn, prepare
from app.runtime.kernels import kernel_turn
from app.runtime.runner import TurnResult, merge_state, resume_turn, run_turn
from app.schemas.vocab import CancelMode, RunStatus, StopReason, cancel_outcome

log = logging.getLogger(__name__)


async def execute(deps: JobDeps, job: Job) -> None:
    """Run ``job`` to a final status; never raises."""
    # The run's log lines carry its id; reset at the end, as an inline run shares its context
    # with the request that runs it.
    run_id_token = run_id_var.set(job.run_id)
    # A model served by several upstreams sends every turn of the session to the same one.
    route_token = route_key.set(job.session_key)
    result = TurnResult()
    turn: Turn | None = None
    try:
        if job.cancel_mode is not None:  # cancelled before this first step (Cancels.cancel)
            await deps.store.locks.release(job.lease)
            raise asyncio.CancelledError
        # The run's task takes the turn's lease; held until the run's end is stored.
        async with deps.store.locks.running(job.session_pk, job.lease.take()) as lease:
            if job.cancel_mode is not None:
                raise asyncio.CancelledError  # cancelled while queued
            job.started = True
            turn = await _begin(deps, job, lambda: result.usage)
            # The budget is checked before every model call of the turn; the turn's own
            # instructions (if any) are added to every model call's system messages; a kernel
            # restart is reported.
            with (
                budget_scope(turn.budget),
                instructions_scope(job.instructions),
                kernel_turn(job.session_pk, job.channel),
            ):
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
                StopReason.LENGTH if result.usage.last_finish == "length" else StopReason.END,
            )
            # Stopped before tool calls a person must decide about: the run waits, stored.
            job.run.__dict__["pending"] = waiting_state(turn.agent, job.session_key, job.spec)
            if job.run.pending is not None:
                status, end = RunStatus.REQUIRES_ACTION, StopReason.REQUIRES_ACTION
            try:
                await finish(deps, job, status, end, result, turn, lease=lease)
            except Exception as exc:
                if not (lease.broken and database_unavailable(exc)):
                    raise
                # The lock's connection was lost (nothing committed there): store the end on a
                # pooled connection, retried while the database is unreachable.
                await finish_safely(deps, job, status, end, result, turn)
    except BudgetExceeded:
        # Stopped at a model-call boundary: keep what the turn produced so far.
        job.finishing = True
        await finish_safely(deps, job, RunStatus.COMPLETED, BUDGET_STOP, result, turn)
    except asyncio.CancelledError:
        mode = job.cancel_mode or CancelMode.SHUTDOWN
        status, keep = cancel_outcome(mode)
        if keep and turn is None and job.resume is None:
            # Interrupted before its turn began (its memory not loaded yet): it still keeps
            # its input, as a run interrupted a moment later does.
            turn = await _input_only(deps, job, lambda: result.usage)
        await finish_safely(deps, job, status, mode, result, turn if keep else None)
    except Exception as exc:
        # The detail (it may hold SQL and its parameters, paths, other tenants' ids) goes to
        # the log only; the run's error says what a client may know, with the request id.
        if isinstance(exc, OutboundRefused):  # the policy's answer, not a fault of ours
            log.warning("run %s: outbound URL refused: %s", job.run_id, exc)
        else:
            log.exception("run %s failed", job.run_id)
        error = public_error(exc)
        await finish_safely(deps, job, RunStatus.FAILED, StopReason.ERROR, result, None, error)
    finally:
        await guard(job.channel.close())
        job.done.set()
        deps.forget(job)
        run_id_var.reset(run_id_token)
        route_key.reset(route_token)


async def _begin(deps: JobDeps, job: Job, usage: Callable[[], Usage]) -> Turn:
    """Build the agent (unless its admission did, ``Job.prepared``) and load the session's
    memory: from the in-process cache when the stored revision matches (no rows read, nothing
    re-validated), else from the rows."""
    ready, job.prepared = job.prepared, None  # once: a second begin builds afresh
    if ready is None:
        ready = prepare(deps.build_agent, job.spec, job.agent_name, job.session_key)
    agent, nodes, memories = ready.agent, ready.nodes, ready.memories
    rev, figures = job.rev, job.budget
    stored: dict[str, list[dict[str, Any]]] | None = None
    if job.run.status == RunStatus.QUEUED or rev is None:
        # It waited for the session (stored ``queued``, or resumed): it marks itself running
        # and reads what may have changed since.
        started = await deps.store.start(
            job.run,
            job.spec.budget,
            lambda rev: rev > 0 and (not memories or deps.memory.get(job.session_pk, rev) is None),
        )
        rev, figures, stored = started.rev, started.figures, started.memory
        cached = deps.memory.get(job.session_pk, rev) if memories else None
    else:
        cached = deps.memory.get(job.session_pk, rev) if memories else None
        unread = cached is None and rev > 0
        if unread or figures is None:
            stored, read = await deps.store.read(
                job.run, job.spec.budget, memory=unread, figures=figures is None
            )
            figures = figures or read
    if cached is None and stored is None and rev == 0:
        stored = {}  # revision 0: nothing was ever stored (every write of messages bumps it)
    assert figures is not None
    job.tenant_limited = figures.tenant_limit is not None
    # A tenant's budget is counted in the database call by call (exact over the fleet).
    meter = deps.meter(job.tenant_id) if job.tenant_limited and deps.meter else None
    job.metered = meter is not None
    budget = figures.budget(usage, meter)
    if memories is not None and nodes is not None:
        if cached is None or set(cached) != set(memories):
            source = stored if stored is not None else await _reload(deps, job)
            cached = {key: [load_message(m) for m in source.get(key, [])] for key in memories}
        for key, memory in memories.items():
            memory.memory = list(cached[key])
        return Turn(agent, nodes, {k: len(v) for k, v in cached.items()}, rev, budget)
    # An agent whose memory this module cannot set directly: the lagent API.
    if stored is None:
        stored = await _reload(deps, job)
    if stored:
        agent.load_state_dict(
            merge_state(agent.state_dict(job.session_key), stored), session_id=job.session_key
        )
    return Turn(agent, None, {k: len(v) for k, v in stored.items()}, rev, budget)


async def _input_only(deps: JobDeps, job: Job, usage: Callable[[], Usage]) -> Turn | None:
    """The turn of a run stopped before it began, with only its input added to the agent's
    memory (None when that cannot be done: the input is then dropped, as before)."""
    try:
        turn = await _begin(deps, job, usage)
        turn.agent.update_memory(job.message, session_id=job.session_key)
    except Exception:
        log.exception("run %s: keeping the input of an interrupted run failed", job.run_id)
        return None
    return turn


async def _reload(deps: JobDeps, job: Job) -> dict[str, list[dict[str, Any]]]:
    return await deps.store.load_memory(job.session_pk)
