"""Resuming runs that wait for a person (``POST /v1/runs/{id}/resume``) and their timeouts.

The decisions are checked before the run is claimed (404 another tenant's run, 409 a run that
does not wait, 422 a bad decision naming its field); the claim is one conditional UPDATE
(``requires_action`` → ``queued``), so of two resumes (two replicas, a person and the timeout)
exactly one goes on and the other gets 409.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from agents.actions.approval import Decision, PendingApproval
from agents.actions.signature import ArgumentError
from app.db.base import utcnow
from app.db.models import Run
from app.errors import NotFound, RunNotWaiting, Unavailable, ValidationFailed
from app.runtime.approvals import Resumption, parse_time, timeout_decisions, waited_s
from app.runtime.events import Event
from app.runtime.store.reads import reading
from app.schemas.sessions import ResumeRequest
from app.schemas.vocab import CancelMode, EventType, RunStatus
from app.services import responses_resumed
from app.services.agent_refs import pinned_spec
from app.services.runs import get_run
from app.state import AppState

log = logging.getLogger(__name__)
TIMEOUT_CHECK_S = 1.0  # how often a replica looks for waiting runs past their deadline


def _not_waiting(run_id: str, status: str) -> RunNotWaiting:
    return RunNotWaiting(
        f"run {run_id!r} is not waiting for approval (status {status!r})", param="run_id"
    )


async def resume_run(
    state: AppState,
    tenant_id: str,
    run_id: str,
    decisions: list[dict[str, Any]],
    inline: bool = False,
    via: str | None = "run_resume",
) -> Run:
    """Check the decisions, claim the waiting run and start its job; returns the run.

    ``via``: how it is resumed, for a Responses API run's next response
    (``responses_resumed.reserve``); None: the caller made it (an ``mcp_approval_response``)."""
    async with reading(state.engine, state.sessionmaker) as db:
        row = await get_run(db, tenant_id, run_id)  # 404: unknown or another tenant's
        if row.status != RunStatus.REQUIRES_ACTION or not row.pending:
            raise _not_waiting(run_id, row.status)
        stored = dict(row.pending)
    store = state.run_manager.store
    async with store.lease() as lease:
        found = await store.lookup(lease, tenant_id, row.session_id)
    session, agent_name, spec = found.session, found.agent_name, found.spec
    # Stored agents it names: their versions when the session started (as for its messages).
    spec = await pinned_spec(state.engine, state.sessionmaker, tenant_id, spec, session.created_at)
    for model in sorted(spec.model_names()):
        handle = state.models.get(model)
        if handle is None or not handle.ready:
            raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
    pending = PendingApproval.from_dict(stored)
    chosen = check_decisions(state, spec, agent_name, pending, decisions)
    made = await responses_resumed.reserve(state, row, decisions, via) if via else None
    try:
        run, events = await _claim(state, run_id)
    except BaseException:  # not resumed: no response of it either
        if made is not None:
            await responses_resumed.delete(state, made)
        raise
    state.run_manager.on_approval_decided(waited_s(stored), "resumed")
    message_index = sum(1 for e in events if e.type == EventType.MESSAGE)
    resumption = Resumption(
        pending, chosen, (run.prompt_tokens, run.completion_tokens), message_index
    )
    state.run_manager.resume(run, spec, resumption, events, inline=inline)
    return run


def check_decisions(
    state: AppState,
    spec: Any,
    agent_name: str,
    pending: PendingApproval,
    decisions: list[dict[str, Any]],
) -> dict[str, Decision]:
    """One decision per pending call, an edit's arguments valid for its tool: else 422."""
    ids = [call.id for call in pending.calls]
    seen: set[str] = set()
    for i, item in enumerate(decisions):
        if item["id"] not in ids:
            raise ValidationFailed(
                f"no pending tool call has id {item['id']!r} (pending: {ids})",
                param=f"decisions[{i}].id",
                code="unknown_tool_call",
            )
        if item["id"] in seen:
            raise ValidationFailed(
                f"two decisions for tool call {item['id']!r}",
                param=f"decisions[{i}].id",
                code="duplicate_decision",
            )
        seen.add(item["id"])
        if item["action"] == "edit" and item.get("arguments") is None:
            raise ValidationFailed(
                "an edit needs the new arguments", param=f"decisions[{i}].arguments",
                code="missing_field",
            )  # fmt: skip
    missing = [call_id for call_id in ids if call_id not in seen]
    if missing:
        raise ValidationFailed(
            f"a decision is needed for every pending tool call; missing {missing}",
            param="decisions",
            code="missing_decision",
        )
    agent = state.build_agent(spec, agent_name)
    executor = getattr(agent, "executor", None)
    check = getattr(executor, "check_arguments", None)
    names = {call.id: call.name for call in pending.calls}
    chosen: dict[str, Decision] = {}
    for i, item in enumerate(decisions):
        if item["action"] == "edit" and check is not None:
            try:
                check(names[item["id"]], item["arguments"])
            except ArgumentError as exc:
                field = exc.fields[0] if exc.fields else ""
                raise ValidationFailed(
                    str(exc),
                    param=f"decisions[{i}].arguments" + (f".{field}" if field else ""),
                    code="invalid_arguments",
                ) from None
        chosen[item["id"]] = Decision(
            item["action"], message=item.get("message"), arguments=item.get("arguments")
        )
    return chosen


async def _claim(state: AppState, run_id: str) -> tuple[Run, list[Event]]:
    """``requires_action`` → ``queued``, once: the run as it is now and its stored events
    (``RunStore.claim_waiting``); 409 when it no longer waits."""
    claimed = await state.run_manager.store.claim_waiting(
        # This replica runs it now (liveness sweeps a dead replica's runs by this column).
        run_id,
        {"replica": state.replica},
    )
    if isinstance(claimed, str):
        raise _not_waiting(run_id, claimed)
    run, rows = claimed
    return run, [Event(seq, EventType(type_), data) for seq, type_, data in rows]


async def check_timeouts(state: AppState) -> int:
    """Deny (or cancel) the waiting runs past their deadline; how many it handled."""
    now = utcnow()
    rows = await state.run_manager.store.waiting_runs()
    state.run_manager.waiting_count = len(rows)
    handled = 0
    for run_id, tenant_id, pending in rows:
        deadline = parse_time(pending.get("deadline")) if pending else None
        if pending is None or deadline is None or deadline > now:
            continue
        try:
            if (pending or {}).get("on_timeout") == "cancel":
                # Only while it still waits: a run a person resumed meanwhile goes on.
                runs = state.run_manager
                if await runs.close_waiting(run_id, CancelMode.APPROVAL_TIMEOUT):
                    runs.on_approval_decided(waited_s(pending), "timeout_cancelled")
            else:
                denials = [
                    {"id": call_id, "action": "deny", "message": d.message}
                    for call_id, d in timeout_decisions(pending).items()
                ]
                await resume_run(state, tenant_id, run_id, denials, via="approval_timeout")
            handled += 1
        except (RunNotWaiting, NotFound):
            continue  # decided meanwhile (another replica, a person)
        except Exception:
            log.exception("the approval timeout of run %s failed", run_id)
    return handled


class ApprovalTimeouts:
    """A replica's periodic check of waiting runs' deadlines (any replica may act: the claim
    is atomic); it runs from start-up, so deadlines pass after restarts too."""

    def __init__(self, state: AppState, every_s: float = TIMEOUT_CHECK_S) -> None:
        self.state = state
        self.every_s = every_s
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="approval-timeouts")

    async def _loop(self) -> None:
        warned = 0.0
        while True:
            await asyncio.sleep(self.every_s)
            try:
                await check_timeouts(self.state)
            except Exception:  # a database outage: try again next time (one warning a minute)
                now = time.monotonic()
                if now - warned >= 60:
                    warned = now
                    log.warning("checking approval timeouts failed", exc_info=True)

    async def aclose(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(BaseException):
                await self._task


def resume_body(body: ResumeRequest) -> list[dict[str, Any]]:
    """The request's decisions as plain dicts."""
    return [d.model_dump() for d in body.decisions]
