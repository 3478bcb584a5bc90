"""The OpenAI front door's side of approvals: pending calls out as ``tool_calls``, decisions in
as ``role: "tool"`` messages on the same ``X-Session-Id`` (docs/approvals.md).

A session whose run waits for approval answers ``/v1/chat/completions`` with the pending calls
as ordinary ``tool_calls`` (``finish_reason: "tool_calls"``). The client's next request on that
session ending with ``tool`` messages, one per call id, resumes the run. Each message's content
is the decision: ``approve`` (or ``approved``, ``yes``) runs the call; a JSON object
``{"action": "approve" | "deny" | "edit", "message": ..., "arguments": {...}}`` says it in full;
any other text denies the call and is what the model reads as the tool's result.
"""

from __future__ import annotations

import json
from typing import Any

from app.errors import NotFound, RunNotWaiting
from app.schemas.openai import ChatMessage
from app.schemas.vocab import RunStatus
from app.services.agent_directory import AgentInfo
from app.services.approvals import resume_run
from app.services.runs import check_session_agent
from app.services.sessions import get_session
from app.state import AppState

APPROVE_WORDS = frozenset({"approve", "approved", "yes", "ok", "y"})


def trailing_tool_messages(messages: list[ChatMessage]) -> list[ChatMessage]:
    """The ``tool`` messages that end the conversation (none: a usual request)."""
    out: list[ChatMessage] = []
    for message in reversed(messages):
        if message.role != "tool":
            break
        out.append(message)
    return out[::-1]


def decision_of(message: ChatMessage) -> dict[str, Any]:
    """The decision a ``tool`` message carries (see the module's doc)."""
    text = message.text().strip()
    call_id = str(message.tool_call_id)
    if text.lower() in APPROVE_WORDS:
        return {"id": call_id, "action": "approve"}
    try:
        data = json.loads(text)
    except ValueError:
        data = None
    if isinstance(data, dict) and data.get("action") in ("approve", "deny", "edit"):
        return {
            "id": call_id,
            "action": data["action"],
            "message": data.get("message"),
            "arguments": data.get("arguments"),
        }
    return {"id": call_id, "action": "deny", "message": text or None}


async def resume_from_tool_messages(
    state: AppState,
    tenant_id: str,
    agent: AgentInfo,
    session_id: str,
    tools: list[ChatMessage],
) -> tuple[str, int]:
    """Resume the session's waiting run with the tool messages' decisions; (run id, the last
    event id before it went on: its answer streams from there)."""
    async with state.sessionmaker() as db:
        try:
            row, row_agent = await get_session(db, tenant_id, session_id)
        except NotFound:  # nothing can wait on a session that does not exist
            raise RunNotWaiting(
                f"no run of session {session_id!r} waits for tool results", param="messages"
            ) from None
        check_session_agent(session_id, row_agent.id, row_agent.name, agent)
    waiting = await state.run_manager.store.run_ids(RunStatus.REQUIRES_ACTION, session_pk=row.pk)
    run_id = waiting[0] if waiting else None
    if run_id is None:
        raise RunNotWaiting(
            f"no run of session {session_id!r} waits for tool results", param="messages"
        )
    decisions = [decision_of(m) for m in tools]
    await resume_run(state, tenant_id, run_id, decisions)
    return run_id, state.run_manager.stored_seq(run_id)
