"""OpenAI chat completions on a persistent session (``X-Session-Id``): the same turn as
``POST /v1/sessions/{id}/messages`` (submission, admission, the run's task), its event log read
back as answer pieces, and a waiting run's pending calls as ``tool_calls``."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents.llms.base import Usage
from app.errors import Unavailable
from app.schemas.agents import GenParams
from app.schemas.openai import ChatCompletionRequest
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
from app.services.turns import TurnEnd, TurnRequest, submit_turn
from app.state import AppState


def session_turn(
    req: ChatCompletionRequest, strategy: str | None = None, idempotency_key: str | None = None
) -> TurnRequest:
    """The turn a chat request asks of its session: the trailing user messages as the message
    (400 before any statement when the last message is not the user's), the request's
    sampling fields as ``gen_params``, ``strategy`` (``X-Multitask-Strategy``; None: the
    agent's default, else ``reject``), ``on_disconnect: continue``, ``source: openai``, and
    its ``Idempotency-Key`` (a key sent before answers the run it started)."""
    _, text = split_input(req.messages)
    gen_params = GenParams.model_validate(req.gen_params()).to_kwargs()
    return TurnRequest(
        text,
        gen_params=gen_params,
        strategy=strategy,
        stream=req.stream,
        on_disconnect="continue",
        source="openai",
        idempotency_key=idempotency_key,
    )


async def session_pieces(
    state: AppState,
    tenant_id: str,
    agent: AgentInfo,
    session_id: str,
    req: ChatCompletionRequest,
    strategy: str | None = None,
    idempotency_key: str | None = None,
) -> AsyncIterator[Piece]:
    """A turn on the persistent session ``session_id`` (created on first use), submitted by
    ``submit_turn`` as ``POST /messages`` submits one: a streamed request follows the run's
    own task; a whole answer runs it in this request's task and is built from its end, kept
    in memory."""
    request = session_turn(req, strategy, idempotency_key)
    turn = await submit_turn(state, tenant_id, session_id, request, agent=agent, create=True)
    hold = holds_turns(turn.spec) or wants_json(req)
    if not turn.inline:  # streamed, or the earlier run of its Idempotency-Key: followed
        return run_pieces(state, turn.run_id, hold, req)
    return _finished_pieces(await turn.finish(), hold, req)


async def _finished_pieces(
    end: TurnEnd, hold: bool, req: ChatCompletionRequest
) -> AsyncIterator[Piece]:
    """The answer of a run that just ended, from its end (``SubmittedTurn.finish``)."""
    run, public = end.run, end.public
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
