"""OpenAI chat completions answered by an agent (stateless, or on a session via X-Session-Id)."""

from __future__ import annotations

import itertools
import json
import uuid
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, nullcontext
from typing import Any

from agents.agent import BaseAgent
from agents.llms.base import CallMeter, Usage, usage_scope
from agents.schema import AgentMessage, AgentStatusCode
from app.errors import BadRequest, Unavailable
from app.ops.budget import STOP_REASON as BUDGET_STOP
from app.ops.budget import RunBudget, budget_scope
from app.runtime.messages import dump_message
from app.runtime.runner import turn_params
from app.schemas.agents import AgentSpec
from app.schemas.openai import ChatCompletionRequest, ChatMessage
from app.services.agent_directory import AgentInfo
from app.services.agent_refs import pinned_spec
from app.services.chat_pieces import Piece
from app.state import AppState

TEXT_STATES = (int(AgentStatusCode.STREAM_ING), int(AgentStatusCode.END))
_END = int(AgentStatusCode.END)


def split_input(messages: list[ChatMessage]) -> tuple[list[ChatMessage], str]:
    """(history, new input): the trailing user messages are the input."""
    cut = len(messages)
    while cut > 0 and messages[cut - 1].role == "user":
        cut -= 1
    if cut == len(messages):
        raise BadRequest("the last message must come from the user", param="messages")
    if cut == len(messages) - 1:  # one new message (the common case)
        return messages[:cut], messages[cut].text()
    return messages[:cut], "\n\n".join(m.text() for m in messages[cut:])


def history_agent_messages(history: list[ChatMessage], agent_name: str) -> list[AgentMessage]:
    """Earlier turns as AgentMessages (system/tool messages: the agent has its own)."""
    return [
        AgentMessage(sender="user" if m.role == "user" else agent_name, content=m.text())
        for m in history
        if m.role in ("user", "assistant")
    ]


def history_messages(history: list[ChatMessage], agent_name: str) -> list[dict[str, Any]]:
    """Earlier turns as AgentMessage dumps (system/tool messages: the agent has its own)."""
    return [dump_message(m) for m in history_agent_messages(history, agent_name)]


def content_text(content: Any) -> str:
    """Message content as a string for OpenAI clients."""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class _Texts:
    """Tracks the text already sent per message so only new characters go out.

    ``hold``: an agent that may call tools (or other agents) does not know whether a model
    turn is its answer until the turn ends, so only the answer (the END message) is sent:
    streamed and whole responses then carry the same content, and a tool call never appears
    as assistant text.
    """

    def __init__(self, hold: bool = False) -> None:
        self.sent = ""
        self.hold = hold

    def piece(self, content: Any, state: int) -> str:
        if state not in TEXT_STATES or (self.hold and state != _END):
            self.sent = ""
            return ""
        text = content_text(content)
        out = text[len(self.sent) :] if text.startswith(self.sent) else text
        self.sent = "" if state == _END else text
        return out


# Session ids of stateless requests: unique in the process (a shared agent holds the memory of
# every request in flight under its own id), and across processes by the random prefix.
_STATELESS_PREFIX = f"stateless:{uuid.uuid4().hex[:12]}:"
_stateless_ids = itertools.count()


async def stateless_pieces(
    state: AppState,
    agent_info: AgentInfo,
    req: ChatCompletionRequest,
    tenant_id: str | None = None,
    figures: tuple[int | None, int] | None = None,
    split: tuple[list[ChatMessage], str] | None = None,
    deltas: bool = True,
) -> AsyncIterator[Piece]:
    """Run the agent over the request's messages without storing anything (but its usage).

    The agent may be shared with concurrent requests (``AppState.stateless_agent``): this one
    runs under a session id of its own, whose memory is dropped when it ends, however it ends.
    ``figures``: the tenant's (budget, used) from ``preflight_tenant`` (read here if omitted);
    ``split``: ``split_input(req.messages)`` if the caller made it; ``deltas`` False: only the
    final piece (a whole, non-streamed answer). The caller has checked the agent's models
    (``check_ready``); a spec naming stored participants is checked here once they resolve.
    """
    spec = agent_info.spec
    history, text = split if split is not None else split_input(req.messages)
    if spec.references() and tenant_id is not None:  # named participants: current versions
        spec = await pinned_spec(state.engine, state.sessionmaker, tenant_id, spec, None)
        check_ready(state, spec)
        agent = state.build_agent(spec, agent_info.name)
    else:  # the caller checked its models (``check_ready``, a 503 before any byte)
        agent = state.stateless_agent(agent_info)
    key = f"{_STATELESS_PREFIX}{next(_stateless_ids)}"
    texts = _Texts(hold=holds_turns(spec) or wants_json(req))
    answer = ""
    try:
        if isinstance(agent, BaseAgent):
            # A new session id has no memory: only earlier turns need adding (no dump/load).
            if history:
                agent.update_memory(history_agent_messages(history, agent_info.name), key)
        else:
            memory = agent.state_dict(key)
            memory["memory"] = history_messages(history, agent_info.name)
            agent.load_state_dict(memory, session_id=key)
        if tenant_id is not None and figures is None:
            figures = await state.tenant_usage.figures(tenant_id)
        limit, used = figures or (None, 0)
        # A tenant's budget: each model call reserved and settled in the database (exact
        # over the fleet, app.ops.token_holds), then not charged again below.
        meter = state.tenant_usage.calls(tenant_id) if tenant_id and limit is not None else None
        with usage_scope() as usage, _budget(usage, limit, used, meter):
            try:
                # The agent's stream itself: a stateless turn has no events or messages to
                # keep, so stream_turn's segmenter (which dumps every message) is not needed.
                # A BaseAgent takes the text as a message from "user" (lagent's convention),
                # and then need not deep-copy a message made here.
                message = (
                    text
                    if isinstance(agent, BaseAgent)
                    else AgentMessage(sender="user", content=text)
                )
                stream = agent.stream(
                    message, session_id=key, **turn_params(agent, req.gen_params())
                )
                async for chunk in stream:
                    stream_state = int(chunk.stream_state)
                    if stream_state == _END:
                        answer = content_text(chunk.content)
                        check_answer_format(req, answer)
                    if deltas and (out := texts.piece(chunk.content, stream_state)):
                        yield Piece(out)
            finally:
                if tenant_id is not None and meter is None:  # stateless runs count too
                    await state.tenant_usage.charge(
                        tenant_id, usage.total_tokens, limited=limit is not None
                    )
    finally:
        if isinstance(agent, BaseAgent):
            agent.reset(key, recursive=True)  # nothing of this request stays in the agent
    yield Piece(
        final=True, usage=usage, answer=answer, finish_reason=finish_reason(usage.last_finish)
    )


def _budget(
    usage: Usage, limit: int | None, used: int, meter: CallMeter | None
) -> AbstractContextManager[Any]:
    """The tenant's budget over this call's usage; without a budget nothing to check."""
    if limit is None:
        return nullcontext()
    budget = RunBudget.build(usage, tenant_limit=limit, tenant_used=used, meter=meter)
    return budget_scope(budget)


def finish_reason(reason: str | None) -> str:
    """OpenAI's finish_reason of an agent's answer: ``length`` when max tokens (or a budget)
    cut it, else ``stop`` (an agent's tool calls are its own: the answer never ends in one)."""
    return "length" if reason in ("length", BUDGET_STOP) else "stop"


# Built-in kinds whose streams hold text that is not the answer (tool calls, other agents).
_MULTI_TURN_KINDS = ("tool_agent", "task")


def holds_turns(spec: AgentSpec) -> bool:
    """Whether the agent may produce text that is not its answer (tool calls, other agents'
    turns): then only the answer is sent, once its turn ends (see ``_Texts``). An operator's
    kind without tools or sub-agents streams as a plain agent does."""
    return bool(
        spec.kind in _MULTI_TURN_KINDS
        or spec.tools
        or spec.sub_agents
        or spec.remote is not None
        or spec.agent is not None
    )


# Chat-completion fields an agent cannot honour: set to anything but their no-op value, they
# are refused (400 unsupported_parameter naming the field) rather than silently dropped.
_NO_OPS: dict[str, tuple[Any, ...]] = {
    "tools": (None, []),
    "tool_choice": (None, "none", "auto"),
    "parallel_tool_calls": (None, True, False),
    "n": (None, 1),
    "logprobs": (None, False),
    "top_logprobs": (None, 0),
    "presence_penalty": (None, 0, 0.0),
    "frequency_penalty": (None, 0, 0.0),
}

_NO_OP_NAMES = frozenset(_NO_OPS)


def check_agent_params(req: ChatCompletionRequest) -> None:
    """400 ``unsupported_parameter`` for a field an agent would ignore. ``response_format``
    ``text`` is what an agent answers; ``json_object`` is honoured by checking the answer."""
    # Each of them defaults to None, a no-op: only those the request sent need a look.
    for name in _NO_OP_NAMES & req.model_fields_set:
        no_ops = _NO_OPS[name]
        value = getattr(req, name)
        if not any(value == ok and type(value) is type(ok) for ok in no_ops):
            raise BadRequest(
                f"{name} is not supported when the model is an agent (the agent's own tools "
                "and settings apply); leave it out",
                param=name,
                code="unsupported_parameter",
            )
    fmt = req.response_format
    if fmt is not None and fmt.type == "json_schema":
        raise BadRequest(
            "response_format json_schema is not supported when the model is an agent; "
            "use json_object or text",
            param="response_format",
            code="unsupported_parameter",
        )


def wants_json(req: ChatCompletionRequest) -> bool:
    """``response_format: json_object``: the answer is checked before any of it is sent."""
    return req.response_format is not None and req.response_format.type == "json_object"


def check_answer_format(req: ChatCompletionRequest, answer: str) -> None:
    """``response_format: json_object``: the agent's answer must be a JSON object."""
    fmt = req.response_format
    if fmt is None or fmt.type != "json_object":
        return
    try:
        if isinstance(json.loads(answer), dict):
            return
    except ValueError:
        pass
    raise Unavailable(
        "response_format json_object: the agent's answer is not a JSON object",
        code="invalid_agent_output",
    )


async def preflight_tenant(state: AppState, tenant_id: str) -> tuple[int | None, int]:
    """The tenant's (budget, used); 429 ``budget_exceeded`` before anything streams if spent."""
    limit, used = await state.tenant_usage.figures(tenant_id)
    if limit is not None:
        RunBudget.build(Usage(), tenant_limit=limit, tenant_used=used).preflight()
    return limit, used


def check_ready(state: AppState, spec: AgentSpec) -> None:
    """503 unless the spec's models (its participants' too; stored ones once they are
    resolved) are loaded. A remote agent uses none of this server's models."""
    for model in sorted(spec.model_names()):
        handle = state.models.get(model)
        if handle is None or not handle.ready:
            raise Unavailable(f"model {model!r} is not ready", code="model_not_ready")
