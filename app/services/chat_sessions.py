"""OpenAI chat completions on a persistent session (``X-Session-Id``): the same turn as
``POST /v1/sessions/{id}/messages`` (submission, admission, the run's task), its event log read
back as answer pieces, and a waiting run's pending calls as ``tool_calls``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from functools import partial
from typing import Any

from agents.llms.base import Usage
from app.errors import Conflict, Unavailable
from app.runtime.runs import Submission
from app.runtime.store import TurnLease
from app.schemas.agents import GenParams
from app.schemas.openai import ChatCompletionRequest
from app.schemas.sessions import RunCreate, SessionCreate
from app.schemas.vocab import END_EVENT, EventType, RunStatus, ends_stream
from app.services.agent_directory import AgentInfo
from app.services.chat import (
    TEXT_STATES,
    check_answer_format,
    content_text,
    finish_reason,
    holds_turns,
    split_input,
    wants_json,
)
from app.services.chat_pieces import Piece
from app.services.runs import SessionNotFound, prepare_submission
from app.services.sessions import create_session
from app.state import AppState


async def session_submission(
    state: AppState,
    lease: TurnLease,
    tenant_id: str,
    agent: AgentInfo,
    session_id: str,
    req: ChatCompletionRequest,
    strategy: str | None = None,
) -> Submission:
    """A run on the persistent session ``session_id`` (created on first use), prepared by the
    same path as ``POST /v1/sessions/{id}/messages`` (``prepare_submission``: its lookup, its
    budget preflight, its batched tenant usage); a busy session follows ``strategy`` (the
    request's header), else the agent's, else ``reject``."""
    _, text = split_input(req.messages)  # 400 before any statement
    fields: dict[str, Any] = {
        "message": text,
        "stream": req.stream,
        "on_disconnect": "continue",
        "gen_params": GenParams.model_validate(req.gen_params()),
    }
    if strategy is not None:  # else the agent's default, as REST's omitted field
        fields["multitask_strategy"] = strategy
    body = RunCreate(**fields)
    prepare = partial(
        prepare_submission,
        state,
        lease,
        tenant_id,
        session_id,
        body,
        None,
        agent=agent,
        source="openai",
    )
    try:
        return await prepare()
    except SessionNotFound:
        pass
    async with state.sessionmaker() as db, db.begin():
        try:
            await create_session(db, tenant_id, SessionCreate(agent=agent.name, id=session_id))
        except Conflict:  # a concurrent first request created it: use that one
            pass
    return await prepare()


async def session_pieces(
    state: AppState,
    tenant_id: str,
    agent: AgentInfo,
    session_id: str,
    req: ChatCompletionRequest,
    strategy: str | None = None,
) -> AsyncIterator[Piece]:
    """A turn on a persistent session, submitted and run as ``POST /messages`` runs one: a
    streamed request follows the run's own task; a whole answer runs it in this request's
    task (``RunManager.run_here``) and is read from its end, kept in memory."""
    runs = state.run_manager
    async with runs.store.lease() as lease:
        sub = await session_submission(state, lease, tenant_id, agent, session_id, req, strategy)
        hold = holds_turns(sub.spec) or wants_json(req)
        run, created = await runs.submit(sub, lease, inline=not req.stream)
    if req.stream or not created:
        return run_pieces(state, run.id, hold, req)
    await runs.run_here(run.id)
    return _finished_pieces(state, run.id, hold, req)


async def _finished_pieces(
    state: AppState, run_id: str, hold: bool, req: ChatCompletionRequest
) -> AsyncIterator[Piece]:
    """The end of a run this process just finished, from memory (else its stored log)."""
    runs = state.run_manager
    run, public = runs.result(run_id), runs.result_public(run_id)
    if run is None or public is None:
        async for piece in run_pieces(state, run_id, hold, req):
            yield piece
        return
    data: dict[str, Any] = {"run": public}
    if run.status == RunStatus.FAILED:
        data["error"] = run.error
    if run.status == RunStatus.REQUIRES_ACTION and run.pending is not None:
        data["tool_calls"] = run.pending["tool_calls"]
    yield end_piece(END_EVENT[RunStatus(run.status)], data, req)


def end_piece(type_: str, data: dict[str, Any], req: ChatCompletionRequest | None) -> Piece:
    """The final piece of a run's answer from its terminal event (``type_``, ``data``): the
    answer, or a waiting run's pending calls as ``tool_calls``; a run that failed or was
    cancelled is a 503 ``run_<status>``."""
    run = data.get("run") or {}
    if type_ == EventType.RUN_COMPLETED:
        usage = Usage(run["usage"]["prompt_tokens"], run["usage"]["completion_tokens"])
        answer = content_text((run.get("output") or {}).get("content", ""))
        if req is not None:
            check_answer_format(req, answer)
        finish = finish_reason(run.get("stop_reason"))
        return Piece(final=True, usage=usage, answer=answer, finish_reason=finish)
    if type_ == EventType.RUN_REQUIRES_ACTION:
        usage = Usage(run["usage"]["prompt_tokens"], run["usage"]["completion_tokens"])
        calls = [openai_tool_call(c) for c in data.get("tool_calls") or []]
        return Piece(final=True, usage=usage, finish_reason="tool_calls", tool_calls=calls)
    error = data.get("error") or run.get("error") or {}
    raise Unavailable(
        f"run {run.get('status', 'failed')}: {error.get('message', '')}".strip(": "),
        code=f"run_{run.get('status', 'failed')}",
    )


async def run_pieces(
    state: AppState,
    run_id: str,
    hold: bool = False,
    req: ChatCompletionRequest | None = None,
    after: int = 0,
) -> AsyncIterator[Piece]:
    """A session run's text deltas from its event log after ``after``, then its end
    (``hold``: the answer only, when the run ends; see ``_Texts``). A run that stops for
    approval ends the answer with its pending calls as ``tool_calls``."""
    async for event in state.run_manager.follow(run_id, after):
        if event.type == EventType.MESSAGE_DELTA:
            if (
                not hold
                and event.data.get("stream_state") in TEXT_STATES
                and isinstance(event.data["delta"], str)
            ):
                yield Piece(event.data["delta"])
        elif ends_stream(event.type):
            final = end_piece(event.type, event.data, req)
            if hold and final.answer:
                yield Piece(final.answer)
            yield final
            return


def openai_tool_call(call: dict[str, Any]) -> dict[str, Any]:
    """A pending call as an OpenAI ``tool_calls`` entry (``Tool.api`` named ``Tool__api``)."""
    arguments = json.dumps(call.get("arguments") or {}, ensure_ascii=False)
    name = str(call["name"]).replace(".", "__")
    return {
        "id": call["id"],
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }
