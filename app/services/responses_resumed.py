"""The responses of a run that went on after approval (``response_continuations`` rows): made
when a pause is answered, whichever way it is answered (docs/responses.md, "Agents: server-side
tools and approvals").

- Through the Responses API (``responses.answer_approvals``): the row is the new response.
- Another way (``POST /v1/runs/{id}/resume``, an approval's timeout, ``approvals.resume_run``):
  a row too (``reserve``), so the Responses view goes on as the run does: the new response's
  ``previous_response_id`` is the waiting one, its input items the decisions, ``background``
  (nobody waits on it: poll it), ``metadata`` empty, ``resumed_by`` how it was resumed. The
  waiting response, retrieved, names it (``metadata.next_response_id``).

Either way the row is inserted before the run is claimed (``RunStore.claim_waiting``): the
unique ``(run_id, segment)`` decides which of two answers to one pause goes on, and the other
gets a 409 before anything runs; a claim that fails after its row was inserted deletes it. The
row also keeps the session's memory at the pause (``memory``: the count of each key's
entries), where a new input continuing the waiting response forks (``responses_plan``).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import utcnow
from app.db.models import ResponseContinuation, Run, RunEvent
from app.errors import RunNotWaiting
from app.schemas.vocab import EventType, RunStatus
from app.services import responses_ids as ids
from app.services.forks import counts_at
from app.state import AppState

log = logging.getLogger(__name__)
SOURCE = "responses"  # a Responses run's ``options.source``
NEXT_KEY = "next_response_id"  # the waiting response's pointer to its run's next response

# The Response's fields that describe the run itself: a continuation repeats the run's.
THE_RUNS = (
    "model",
    "instructions",
    "tools",
    "tool_choice",
    "parallel_tool_calls",
    "text",
    "max_output_tokens",
    "temperature",
    "top_p",
    "conversation",
)


def is_response_run(run: Run) -> bool:
    """Whether a run is a Responses API response's (its pauses are responses)."""
    options = run.options or {}
    return options.get("source") == SOURCE or "response" in options


async def pauses(state: AppState, run_id: str) -> int:
    """How many times a run paused for approval (its ``run.requires_action`` events)."""
    async with state.sessionmaker() as db:
        found = await db.scalar(
            sa.select(sa.func.count())
            .select_from(RunEvent)
            .where(RunEvent.run_id == run_id, RunEvent.type == EventType.RUN_REQUIRES_ACTION)
        )
    return int(found or 0)


async def insert(
    state: AppState, row: ResponseContinuation, run: Run, waiting_id: str, param: str
) -> None:
    """Insert a continuation (with the session's memory at the pause); a 409 naming the
    response that answered the pause meanwhile (another request, another replica)."""
    try:
        async with state.sessionmaker() as db, db.begin():
            memory = await counts_at(db, run.session_pk, run)
            row.request = {**row.request, "memory": memory}
            db.add(row)
    except IntegrityError:
        answer = await following(state, run.id, row.segment - 1)
        raise answered(waiting_id, answer[0] if answer else None, param) from None


def answered(waiting_id: str, answer: str | None, param: str) -> RunNotWaiting:
    """409: the response's approval requests were answered (by ``answer``)."""
    went_on = f"; its run went on as response {answer!r}" if answer else ""
    return RunNotWaiting(
        f"response {waiting_id!r} does not wait for approval (it was answered{went_on})",
        param=param,
    )


async def following(
    state: AppState, run_id: str, segment: int
) -> tuple[str, dict[str, Any]] | None:
    """The response that answered the pause ending segment ``segment`` of a run: its id and
    request (None: not answered)."""
    async with state.sessionmaker() as db:
        row = await db.scalar(
            sa.select(ResponseContinuation).where(
                ResponseContinuation.run_id == run_id, ResponseContinuation.segment == segment + 1
            )
        )
    return (row.id, dict(row.request or {})) if row is not None else None


async def delete(state: AppState, continuation_id: str) -> None:
    """Delete a continuation row (its answer did not go on)."""
    async with state.sessionmaker() as db, db.begin():
        await db.execute(
            sa.delete(ResponseContinuation).where(ResponseContinuation.id == continuation_id)
        )


async def reserve(
    state: AppState, run: Run, decisions: list[dict[str, Any]], via: str
) -> str | None:
    """A Responses run about to be resumed another way (``via``: ``run_resume``,
    ``approval_timeout``): its next response, inserted before the claim (module docstring);
    its id (None: not a Responses run)."""
    if not is_response_run(run):
        return None
    segment = await pauses(state, run.id)
    if segment < 1:
        return None
    own = (run.options or {}).get("response") or {}
    waiting_id: str | None = run.id
    ran: dict[str, Any] = own
    if segment > 1:  # the waiting response is the answer to the pause before (if kept)
        before = await following(state, run.id, segment - 2)
        waiting_id, ran = before if before is not None else (None, own)
    conversation = ran.get("conversation")
    meta: dict[str, Any] = {k: ran.get(k) for k in THE_RUNS}
    meta.update(
        previous_response_id=None if conversation else waiting_id,
        metadata={},
        background=True,  # nobody waits on it: poll it (and it can be cancelled)
        store=True,
        prompt_cache_key=None,
        user=ran.get("user"),
        session=run.session_id,
        input=[_decision_item(d) for d in decisions],
        resumed_by=via,
    )
    row = ResponseContinuation(
        id=ids.mint(ids.RESPONSE, ids.route_key(None, run.id)),
        tenant_id=run.tenant_id,
        run_id=run.id,
        segment=segment,
        request=meta,
        created_at=utcnow(),
    )
    await insert(state, row, run, waiting_id or run.id, "run_id")
    return row.id


def _decision_item(decision: dict[str, Any]) -> dict[str, Any]:
    """A run's decision as the ``mcp_approval_response`` input item it would have been (an
    edit approves the call with other arguments)."""
    item: dict[str, Any] = {
        "type": "mcp_approval_response",
        "approval_request_id": str(decision["id"]),
        "approve": decision.get("action") != "deny",
    }
    if decision.get("action") == "deny" and decision.get("message"):
        item["reason"] = decision["message"]
    return item


async def forget(state: AppState, continuation_id: str) -> None:
    """A ``store: false`` answer once its part of the run has ended: no longer found (its row
    stays while the run does: it marks the pause answered; its approval requests, if the run
    paused again, can still be answered by its id). The run goes with the last of its
    responses, once it has ended."""
    async with state.sessionmaker() as db, db.begin():
        row = await db.get(ResponseContinuation, continuation_id)
        if row is None:
            return
        row.request = {**(row.request or {}), "deleted": True}
        await db.flush()
        await drop_if_gone(db, row.run_id, ended_only=True)


def forget_later(state: AppState, run_id: str, continuation_id: str) -> None:
    """``forget`` once the run's job ends (it pauses again or ends)."""

    async def later() -> None:
        try:
            await state.run_manager.wait(run_id)
            await forget(state, continuation_id)
        except Exception:  # logged: the response stays, as a stored one
            log.exception("responses: forgetting response %s failed", continuation_id)

    task = asyncio.create_task(later())
    _FORGETTING.add(task)
    task.add_done_callback(_FORGETTING.discard)


_FORGETTING: set[asyncio.Task[None]] = set()  # held: tasks are weak


async def drop_if_gone(db: AsyncSession, run_id: str, ended_only: bool = False) -> None:
    """Delete a run (its events, its continuations) when none of its responses is left: its
    own deleted, each continuation deleted or forgotten (``ended_only``: and it has ended)."""
    run = await db.get(Run, run_id)
    if run is None or not ((run.options or {}).get("response") or {}).get("deleted"):
        return
    if ended_only and not RunStatus(run.status).terminal:
        return
    requests = (
        await db.scalars(
            sa.select(ResponseContinuation.request).where(ResponseContinuation.run_id == run_id)
        )
    ).all()
    if all((request or {}).get("deleted") for request in requests):
        await db.execute(sa.delete(Run).where(Run.id == run_id))
