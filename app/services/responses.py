"""``POST /v1/responses``: a response is a run of a session (docs/responses.md, "The mapping").

Where it runs is ``responses_plan``'s; here the run itself: its input (the request's chat
messages for a raw model's agent, the trailing user text for an agent), its parameters, what
the Response repeats of the request (kept in the run's ``options.response``), its submission
by the one turn path (``submit_turn``; the run's id is the response's, ``resp_...``), and what
happens to it afterwards: ``store: false`` sessions deleted, approvals answered (a new
response: the run's log after its pause), cancel, delete.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import replace
from typing import Any

import sqlalchemy as sa

from agents.chat_agent import chat_message
from agents.schema import AgentMessage
from app.db.base import utcnow
from app.db.models import ResponseContinuation, Run
from app.db.models import Session as SessionRow
from app.errors import BadRequest, RunNotWaiting
from app.schemas.agents import AgentSpec
from app.schemas.responses import ResponseCreate
from app.schemas.vocab import CancelMode, RunStatus
from app.services import responses_ids as ids
from app.services import responses_read as read
from app.services import responses_resumed as continued
from app.services.agent_directory import AgentInfo
from app.services.approvals import resume_run
from app.services.auth import Principal
from app.services.chat import holds_turns
from app.services.responses_input import Input, model_tools, response_format
from app.services.responses_mcp import list_servers, mcp_refs
from app.services.responses_plan import SOURCE, Planned, one_parent
from app.services.responses_read import Stored
from app.services.responses_resumed import THE_RUNS
from app.services.turns import SubmittedTurn, TurnRequest, submit_turn
from app.state import AppState

log = logging.getLogger(__name__)


def run_message(agent: AgentInfo, inp: Input) -> AgentMessage | str:
    """The run's input: the request's chat messages for a raw model (kind ``model``, a
    message the admission takes as it is: no dump and parse); the text of its trailing user
    messages for an agent (its instructions are its own)."""
    if agent.spec.kind == "model":
        return chat_message("user", inp.text(), inp.messages)
    return inp.text()


def run_params(agent: AgentInfo, req: ResponseCreate) -> dict[str, Any]:
    """The run's model-call parameters (a raw model also gets the tools and the answer
    format)."""
    params = sampling(req)
    if agent.spec.kind != "model":
        return params
    return {**params, **model_params(req)}


def sampling(req: ResponseCreate) -> dict[str, Any]:
    """The request's sampling fields as generation parameters."""
    params: dict[str, Any] = {}
    if req.max_output_tokens is not None:
        params["max_new_tokens"] = req.max_output_tokens
    if req.temperature is not None:
        params["temperature"] = req.temperature
    if req.top_p is not None:
        params["top_p"] = req.top_p
    return params


def model_params(req: ResponseCreate) -> dict[str, Any]:
    """What a raw model's call gets besides sampling: the function tools, the answer format."""
    params = dict(model_tools(req.tool_dicts(), req.tool_choice, req.parallel_tool_calls).params)
    fmt = response_format(req.text)
    if fmt is not None:
        params["response_format"] = fmt
    return params


def response_meta(
    req: ResponseCreate, spec: AgentSpec | None, session_id: str | None
) -> dict[str, Any]:
    """What the Response repeats of its request (kept in the run's options); ``spec``: the
    agent's (None: the raw model itself, no session)."""
    hosted = spec is None or spec.kind == "model"  # an agent's tools are its own
    tools = [t for t in req.tool_dicts() if t.get("type") == "function"] if hosted else []
    text = req.text.model_dump(by_alias=True, exclude_none=True) if req.text else {}
    text.setdefault("format", {"type": "text"})
    return {
        "model": req.model,
        "instructions": req.instructions,
        "tools": [_function_tool(t) for t in tools],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": req.parallel_tool_calls,
        "text": text,
        "max_output_tokens": req.max_output_tokens,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "metadata": req.metadata or {},
        "previous_response_id": req.previous_response_id,
        "conversation": req.conversation_id(),
        "background": req.background,
        "store": req.store,
        "prompt_cache_key": req.prompt_cache_key,
        "user": req.user,
        "hold": spec is not None and holds_turns(spec),
        "session": session_id,
        "input": (
            req.items()
            if isinstance(req.input, list)
            else [{"type": "message", "role": "user", "content": req.input}]
        ),
    }


def _function_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "name": tool.get("name"),
        "description": tool.get("description"),
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
        "strict": bool(tool.get("strict", True)),
    }


async def start(
    state: AppState, who: Principal, req: ResponseCreate, planned: Planned, inp: Input
) -> SubmittedTurn:
    """Submit the response's run by the one turn path (``submit_turn``): inline for a whole
    answer, with its own task when streamed or in the background. ``instructions`` are the
    turn's (a system message for its model calls only, never stored)."""
    waits = not (req.stream or req.background)
    meta = response_meta(req, planned.agent.spec, planned.session_id)
    spec = planned.agent.spec
    if spec.kind != "model" and mcp_refs(spec):  # its servers' tools, for mcp_list_tools
        meta["mcp"] = await list_servers(state, spec, who.tenant_id, planned.session_id)
    request = TurnRequest(
        message=run_message(planned.agent, inp),
        gen_params=run_params(planned.agent, req),
        strategy="enqueue",  # a chain's next response waits for the one before
        stream=not waits,
        on_disconnect="continue" if req.background else "cancel",
        source=SOURCE,
        instructions=req.instructions or None,
        run_id=ids.mint(ids.RESPONSE, planned.key),
        options={"response": meta},
    )
    return await submit_turn(
        state, who.tenant_id, planned.session_id, request, agent=planned.agent, inline=waits
    )


def created_at(run: Run) -> float:
    """The response's ``created_at`` (seconds)."""
    return run.created_at.timestamp() if run.created_at is not None else time.time()


# store: false sessions waiting for their run's end to be deleted (held: tasks are weak).
_FORGETTING: set[asyncio.Task[None]] = set()


def forget_later(state: AppState, tenant_id: str, session_id: str, run_id: str) -> None:
    """Delete a ``store: false`` response's session (and its run) once the run ends."""

    async def forget() -> None:
        try:
            await state.run_manager.wait(run_id)
            await forget_session(state, tenant_id, session_id)
        except Exception:  # logged: the session stays, as any other
            log.exception("responses: forgetting session %s failed", session_id)

    task = asyncio.create_task(forget())
    _FORGETTING.add(task)
    task.add_done_callback(_FORGETTING.discard)


async def forget_session(state: AppState, tenant_id: str, session_id: str) -> None:
    """Delete a session now (its runs, events and messages go with it)."""
    async with state.sessionmaker() as db, db.begin():
        await db.execute(
            sa.delete(SessionRow).where(
                SessionRow.tenant_id == tenant_id, SessionRow.id == session_id
            )
        )
    state.turn_sessions.pop((tenant_id, session_id))


async def answer_approvals(
    state: AppState, who: Principal, req: ResponseCreate, inp: Input, header: str | None
) -> Stored:
    """``mcp_approval_response`` items with ``previous_response_id`` (or ``conversation``: its
    latest response): the decisions about the calls that response waits on (``approve``; a
    denial's ``reason`` is what the model reads). Its run goes on (docs/approvals.md) as a new
    response, as OpenAI answers: the continuation, the run's log after the pause (a row of
    ``response_continuations``; the waiting response stays as it was). Returns it."""
    conversation = one_parent(req)
    param = "conversation" if conversation else "previous_response_id"
    waiting: Stored | None = None
    if req.previous_response_id:
        previous = req.previous_response_id
        waiting = await read.find(state, who.tenant_id, previous, param, forgotten=True)
    elif conversation:
        waiting = await read.latest_in(state, who.tenant_id, conversation)
        if waiting is None:
            raise RunNotWaiting(f"conversation {conversation!r} has no response", param=param)
    else:
        raise BadRequest(
            "mcp_approval_response items answer a response: send its previous_response_id"
            " (or its conversation)",
            param="previous_response_id",
            code="missing_field",
        )
    run = waiting.run
    segment = await continued.pauses(state, run.id)  # the new one's: after the last pause
    if run.status != RunStatus.REQUIRES_ACTION or waiting.segment != segment - 1:
        answer = await continued.following(state, run.id, waiting.segment)
        if answer is not None:
            raise continued.answered(waiting.id, answer[0], param)
        raise RunNotWaiting(
            f"response {waiting.id!r} does not wait for approval (its run is {run.status!r})",
            param=param,
        )
    if req.background and not req.store:
        raise BadRequest(
            "background responses must be stored (store: true)", param="store", code="not_supported"
        )
    decisions = [
        {
            "id": str(item["approval_request_id"]),
            "action": "approve" if item["approve"] else "deny",
            "message": item.get("reason"),
        }
        for item in inp.approvals
    ]
    # Its own request's fields, but what the run goes on with is the run's (its model, its
    # instructions and parameters) and where it waited (its conversation).
    ran = waiting.request
    meta = {**response_meta(req, None, run.session_id), **{k: ran.get(k) for k in THE_RUNS}}
    meta.pop("hold")  # how the run streams is the run's (``options.response``)
    row = ResponseContinuation(
        id=ids.mint(ids.RESPONSE, ids.route_key(header, waiting.id)),
        tenant_id=who.tenant_id,
        run_id=run.id,
        segment=segment,
        request=meta,
        created_at=utcnow(),
    )
    await continued.insert(state, row, run, waiting.id, param)
    try:
        await resume_run(state, who.tenant_id, run.id, decisions, via=None)
    except BaseException:  # not resumed (a bad decision, another resume first): no response
        await continued.delete(state, row.id)
        raise
    return read.Stored(row.id, run, segment, row.request, row.created_at)


async def cancel_response(state: AppState, found: Stored) -> Stored:
    """Cancel a background response's run (its engine call and kernel stop, as any run's
    cancel) while it is the run's latest response; one that has ended (an earlier response of
    the run ended at its pause), or was not created with ``background``, cannot be cancelled
    (400, as OpenAI answers)."""
    run = found.run
    if not found.request.get("background"):  # OpenAI cancels background responses only
        raise BadRequest(
            "Cannot cancel a synchronous response.",
            param="response_id",
            code="response_not_cancellable",
        )
    latest = await read.last_segment(state, run.id) == found.segment
    if not latest or RunStatus(run.status).terminal:
        status = run.status if latest else "completed"
        raise BadRequest(
            f"Cannot cancel a response with status '{status}'.",
            param="response_id",
            code="response_not_cancellable",
        )
    await state.run_manager.cancel(run.id, CancelMode.CANCELLED)
    async with state.sessionmaker() as db:
        now = await db.get(Run, run.id)
    return replace(found, run=now) if now is not None else found


async def delete_response(state: AppState, found: Stored) -> None:
    """Delete a response (its run cancelled first while it runs as this response). A run
    with one response goes with its events; of a run that went on after approval as several
    responses, the one deleted is no longer found, and the run goes with the last of them.
    Its turn stays in the session's memory."""
    run = found.run
    if not RunStatus(run.status).terminal and await read.last_segment(state, run.id) == (
        found.segment
    ):
        await state.run_manager.cancel(run.id, CancelMode.CANCELLED)
    async with state.sessionmaker() as db, db.begin():
        if found.meta is not None:  # a continuation: its row goes
            await db.execute(
                sa.delete(ResponseContinuation).where(ResponseContinuation.id == found.id)
            )
        else:  # the run's own: marked deleted (its continuations may stay)
            row = await db.get(Run, run.id)
            if row is not None:
                options = dict(row.options or {})
                options["response"] = {**(options.get("response") or {}), "deleted": True}
                row.options = options
        await db.flush()
        await continued.drop_if_gone(db, run.id)
