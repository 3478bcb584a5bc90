"""``POST /v1/responses``: a response is a run of a session (docs/responses.md, "The mapping").

- ``model`` is a stored agent (its session runs it as any turn), or a raw model, which runs as
  the tenant's agent ``responses.<model>`` of kind ``model`` (created on first use): the model
  as it is, on the request's chat messages and function tools.
- The session: ``previous_response_id``'s (the chain goes on in it), or a fork of it at that
  response when the chain already went on from there, or another model answers (two responses
  naming one ``previous_response_id`` each see the history up to it, not each other);
  ``conversation``'s (the conversation is a session); else a new session ``chain_...``.
  ``store: false`` runs in a session of its own (a fork when it continues a chain) that is
  deleted when the run ends: nothing stays retrievable.
- The run's id is the response's (``resp_...``); what the request said of the response
  (instructions, tools, text format, metadata, ...) is kept in the run's ``options``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa

from agents.chat_agent import chat_message
from app.db.models import Agent, Run
from app.db.models import Session as SessionRow
from app.engines.base import ModelHandle
from app.errors import BadRequest, Conflict, NotFound, RunNotWaiting, Unavailable
from app.runtime.messages import dump_message
from app.schemas.agents import AgentCreate, AgentSpec
from app.schemas.responses import ResponseCreate
from app.schemas.sessions import SessionCreate
from app.schemas.vocab import CancelMode, RunStatus
from app.services import responses_ids as ids
from app.services.agent_directory import AgentInfo
from app.services.agents import create_agent
from app.services.approvals import resume_run
from app.services.auth import Principal
from app.services.chat import holds_turns
from app.services.forks import counts_at, fork_session
from app.services.responses_input import Input, model_tools, response_format
from app.services.responses_read import last_number
from app.services.sessions import create_session
from app.services.turns import SubmittedTurn, TurnRequest, submit_turn
from app.state import AppState

log = logging.getLogger(__name__)
SOURCE = "responses"  # the run's ``options.source``


@dataclass
class Planned:
    """Where a new response runs."""

    session_id: str
    agent: AgentInfo
    key: str  # the route key of its ids
    forget: bool  # store: false: the session goes when the run ends


async def agent_for(state: AppState, who: Principal, model: str) -> AgentInfo:
    """The stored agent called ``model``, else the raw model's implicit agent (404 for
    neither)."""
    agents = await state.agents.agents(state.sessionmaker, who.tenant_id)
    agent = agents.get(model)
    if agent is not None:
        return agent
    if model not in state.models.names() or not who.may_use(model):
        raise NotFound(f"model {model!r} not found", param="model", code="model_not_found")
    name = ids.implicit_agent_name(model)
    agent = agents.get(name)
    if agent is not None and agent.spec.kind == "model" and agent.spec.model == model:
        return agent
    if agent is None:
        spec = AgentSpec(kind="model", model=model)
        body = AgentCreate(
            name=name,
            description=f"The Responses API's agent for the model {model!r}",
            spec=spec,
        )
        async with state.sessionmaker() as db, db.begin():
            try:
                await create_agent(db, who.tenant_id, body, state.registry, state.models.names())
            except Conflict:  # a concurrent first request created it
                pass
        agent = await state.agents.find(state.sessionmaker, who.tenant_id, name)
    if agent is None or agent.spec.kind != "model" or agent.spec.model != model:
        raise BadRequest(
            f"the agent {name!r} exists and is not the model {model!r}'s", param="model"
        )
    return agent


async def raw_model(state: AppState, who: Principal, model: str) -> ModelHandle | None:
    """The raw model ``model`` names (None: it names a stored agent); 404 for neither, 503
    while it loads."""
    if model in await state.agents.agents(state.sessionmaker, who.tenant_id):
        return None
    handle = state.models.get(model)
    if handle is None or not who.may_use(model):
        raise NotFound(f"model {model!r} not found", param="model", code="model_not_found")
    if not handle.ready:
        raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
    return handle


def stateless(req: ResponseCreate) -> bool:
    """Whether the response can run without a session: nothing to keep, nothing to continue."""
    return not (req.store or req.background or req.previous_response_id or req.conversation_id())


async def response_run(state: AppState, tenant_id: str, response_id: str, param: str) -> Run:
    """The tenant's stored response (its run); 404 naming the id otherwise."""
    async with state.sessionmaker() as db:
        run = await db.get(Run, response_id) if response_id.startswith(ids.RESPONSE) else None
    if run is None or run.tenant_id != tenant_id:
        raise NotFound(
            f"Response with id '{response_id}' not found.", param=param, code="response_not_found"
        )
    return run


async def plan(
    state: AppState, who: Principal, req: ResponseCreate, agent: AgentInfo, header: str | None
) -> Planned:
    """The session a new response runs in (module docstring)."""
    conversation = req.conversation_id()
    if req.previous_response_id and conversation:
        raise BadRequest(
            "previous_response_id and conversation cannot be used together",
            param="conversation",
            code="not_supported",
        )
    if req.background and not req.store:
        raise BadRequest(
            "background responses must be stored (store: true)", param="store", code="not_supported"
        )
    forget = not req.store
    key = ids.route_key(header, req.previous_response_id or conversation)
    tenant = who.tenant_id
    if req.previous_response_id:
        parent = await response_run(state, tenant, req.previous_response_id, "previous_response_id")
        return await _continue(state, parent, agent, key, forget)
    if conversation:
        return await _conversation(state, tenant, conversation, agent, key, forget)
    session_id = ids.mint(ids.CHAIN, key)
    async with state.sessionmaker() as db, db.begin():
        body = SessionCreate(agent=agent.name, id=session_id, metadata={"source": SOURCE})
        await create_session(db, tenant, body)
    return Planned(session_id, agent, key, forget)


async def _continue(
    state: AppState, parent: Run, agent: AgentInfo, key: str, forget: bool
) -> Planned:
    """The chain goes on in ``parent``'s session, or in a fork of it at ``parent``."""
    async with state.sessionmaker() as db, db.begin():
        session = await db.get(SessionRow, parent.session_pk)
        if session is None:  # pragma: no cover - a run goes with its session
            raise NotFound(f"Response with id '{parent.id}' not found.")
        latest = await db.scalar(
            sa.select(Run.id)
            .where(Run.session_pk == session.pk)
            .order_by(Run.created_at.desc(), Run.id.desc())
            .limit(1)
        )
        if latest == parent.id and session.agent_id == agent.id and not forget:
            return Planned(session.id, agent, key, forget)
        counts = await counts_at(db, session.pk, parent)
        agent_row = await db.get(Agent, agent.id)
        assert agent_row is not None
        fork = await fork_session(
            db, session, counts, agent_row, ids.mint(ids.CHAIN, key), {"source": SOURCE}
        )
        return Planned(fork.id, agent, key, forget)


async def _conversation(
    state: AppState, tenant: str, conversation: str, agent: AgentInfo, key: str, forget: bool
) -> Planned:
    """A conversation's session (its agent switched to ``agent`` when both are raw models'
    agents, or it has no run yet); ``store: false`` forks it."""
    async with state.sessionmaker() as db, db.begin():
        session = await db.scalar(
            sa.select(SessionRow).where(
                SessionRow.tenant_id == tenant, SessionRow.id == conversation
            )
        )
        if session is None or not conversation.startswith(ids.CONVERSATION):
            raise NotFound(
                f"Conversation with id '{conversation}' not found.",
                param="conversation",
                code="conversation_not_found",
            )
        agent_row = await db.get(Agent, agent.id)
        assert agent_row is not None
        if forget:
            last = await db.scalar(
                sa.select(Run)
                .where(Run.session_pk == session.pk)
                .order_by(Run.created_at.desc(), Run.id.desc())
                .limit(1)
            )
            counts = (
                await counts_at(db, session.pk, last)
                if last is not None
                else await _all(db, session)
            )
            fork = await fork_session(db, session, counts, agent_row, ids.mint(ids.CHAIN, key))
            return Planned(fork.id, agent, key, forget)
        if session.agent_id != agent.id:
            current = await db.get(Agent, session.agent_id)
            implicit = (current is not None and current.name.startswith(ids.IMPLICIT_AGENT)) and (
                agent.name.startswith(ids.IMPLICIT_AGENT)
            )
            ran = await db.scalar(sa.select(Run.id).where(Run.session_pk == session.pk).limit(1))
            if not implicit and ran is not None:
                raise BadRequest(
                    f"conversation {conversation!r} is with {current.name if current else '?'}"
                    f"; it cannot go on with {agent.name!r}",
                    param="model",
                    code="not_supported",
                )
            session.agent_id, session.agent_version = agent.id, agent.version
            state.turn_sessions.pop((tenant, conversation))
    return Planned(conversation, agent, key, forget)


async def _all(db: Any, session: SessionRow) -> dict[str, int]:
    from app.runtime.store.rows import load_state

    return {k: len(v) for k, v in (await load_state(db, session.pk)).items()}


def run_message(agent: AgentInfo, inp: Input) -> dict[str, Any] | str:
    """The run's input: the request's chat messages for a raw model (kind ``model``); the text
    of its trailing user messages for an agent (its instructions are its own)."""
    if agent.spec.kind == "model":
        return dump_message(chat_message("user", inp.text(), inp.messages))
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
    request = TurnRequest(
        message=run_message(planned.agent, inp),
        gen_params=run_params(planned.agent, req),
        strategy="enqueue",  # a chain's next response waits for the one before
        stream=not waits,
        on_disconnect="continue" if req.background else "cancel",
        source=SOURCE,
        instructions=req.instructions or None,
        run_id=ids.mint(ids.RESPONSE, planned.key),
        options={"response": response_meta(req, planned.agent.spec, planned.session_id)},
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


async def resume_approved(
    state: AppState, who: Principal, req: ResponseCreate, inp: Input
) -> tuple[Run, int]:
    """``mcp_approval_response`` items with ``previous_response_id``: the decisions about the
    calls that response waits on (``approve``; a denial's ``reason`` is what the model reads);
    its run goes on (docs/approvals.md). Returns the run and the number of its last stream
    event before it went on (the answer streams after it)."""
    if not req.previous_response_id:
        raise BadRequest(
            "mcp_approval_response items answer a response: send its previous_response_id",
            param="previous_response_id",
            code="missing_field",
        )
    run = await response_run(state, who.tenant_id, req.previous_response_id, "previous_response_id")
    if run.status != RunStatus.REQUIRES_ACTION:
        raise RunNotWaiting(
            f"response {run.id!r} does not wait for approval (status {run.status!r})",
            param="previous_response_id",
        )
    decisions = [
        {
            "id": str(item["approval_request_id"]),
            "action": "approve" if item["approve"] else "deny",
            "message": item.get("reason"),
        }
        for item in inp.approvals
    ]
    after = await last_number(state, run)
    await resume_run(state, who.tenant_id, run.id, decisions)
    return run, after


async def cancel_response(state: AppState, run: Run) -> Run:
    """Cancel a response's run (its engine call and kernel stop, as any run's cancel); a
    response that has ended cannot be cancelled (400, as OpenAI answers)."""
    if RunStatus(run.status).terminal:
        raise BadRequest(
            f"Cannot cancel a response with status '{run.status}'.",
            param="response_id",
            code="response_not_cancellable",
        )
    await state.run_manager.cancel(run.id, CancelMode.CANCELLED)
    async with state.sessionmaker() as db:
        found = await db.get(Run, run.id)
    return found if found is not None else run


async def delete_response(state: AppState, run: Run) -> None:
    """Delete a response: its run and events (cancelled first while active); its turn stays
    in the session's memory."""
    if not RunStatus(run.status).terminal:
        await state.run_manager.cancel(run.id, CancelMode.CANCELLED)
    async with state.sessionmaker() as db, db.begin():
        await db.execute(sa.delete(Run).where(Run.id == run.id))
