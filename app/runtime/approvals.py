"""Runs that wait for a person: the stored state of a paused run and what resumes it.

A tool agent whose executor's approval hook says ``pause`` stops before the call
(``agents.actions.approval``); its run ends its task with status ``requires_action`` and stores
``Run.pending``: the calls, where the agent stopped, since when it waits and (with
``approval.timeout_s``) until when. ``POST /v1/runs/{id}/resume`` claims the run back
(``requires_action`` → ``queued``, only once across replicas) and runs a job that feeds the
decisions to ``agent.resume_stream`` on the same run's event log.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from agents.actions.approval import Decision, PendingApproval
from app.db.base import utcnow
from app.schemas.agents import AgentSpec

DENIED_ON_TIMEOUT = "Nobody decided about this call in time."


@dataclass
class Resumption:
    """What a resumed run's job feeds its agent."""

    pending: PendingApproval
    decisions: dict[str, Decision]
    tokens: tuple[int, int]  # the run's prompt and completion tokens before it waited
    message_index: int  # the index its next ``message`` event takes


def _iso(value: datetime) -> str:
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def parse_time(value: str | None) -> datetime | None:
    """A stored ``since`` / ``deadline`` back as a datetime."""
    if not value:
        return None
    return datetime.fromisoformat(value.replace("Z", "+00:00"))


def waiting_state(agent: Any, session_key: str, spec: AgentSpec) -> dict[str, Any] | None:
    """``Run.pending`` for an agent that stopped before calls (None: it did not)."""
    pending = getattr(agent, "pending", None)
    if not isinstance(pending, dict):
        return None
    waiting = pending.pop(session_key, None)
    if not isinstance(waiting, PendingApproval):
        return None
    now = utcnow()
    state = waiting.to_dict()
    state["since"] = _iso(now)
    approval = spec.approval
    if approval is not None and approval.timeout_s:
        state["deadline"] = _iso(now + timedelta(seconds=approval.timeout_s))
        state["on_timeout"] = approval.on_timeout
    return state


def required_action(pending: dict[str, Any] | None) -> dict[str, Any] | None:
    """The run's public ``required_action``: the calls a person decides about."""
    if not pending:
        return None
    return {
        "type": "tool_calls",
        "tool_calls": pending.get("tool_calls") or [],
        "since": pending.get("since"),
        "deadline": pending.get("deadline"),
    }


def waited_s(pending: dict[str, Any] | None) -> float:
    """How long a run waited (0 when unknown)."""
    since = parse_time((pending or {}).get("since"))
    return max(0.0, (utcnow() - since).total_seconds()) if since is not None else 0.0


def timeout_decisions(pending: dict[str, Any]) -> dict[str, Decision]:
    """Every pending call denied, for a run nobody answered in time."""
    return {
        str(call["id"]): Decision.deny(DENIED_ON_TIMEOUT)
        for call in pending.get("tool_calls") or []
    }
