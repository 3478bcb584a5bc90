"""OpenAI chat completions answered by an agent (stateless, or on a session via X-Session-Id)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from agents.llms.base import Usage, usage_scope
from agents.schema import AgentMessage, AgentStatusCode
from app.errors import BadRequest, NotFound, Unavailable
from app.ops.budget import RunBudget, budget_scope
from app.ops.budget_store import preflight
from app.runtime.messages import dump_message
from app.runtime.runner import stream_turn
from app.runtime.runs import Submission
from app.schemas.agents import AgentSpec, GenParams
from app.schemas.openai import ChatCompletionRequest, ChatMessage
from app.schemas.sessions import SessionCreate
from app.services.agent_directory import AgentInfo
from app.services.agents import agent_spec
from app.services.sessions import create_session, get_session
from app.state import AppState

_TEXT_STATES = (int(AgentStatusCode.STREAM_ING), int(AgentStatusCode.END))


@dataclass
class Piece:
    """Text for the client, or the end of the answer."""

    text: str = ""
    final: bool = False
    usage: Usage = field(default_factory=Usage)
    finish_reason: str = "stop"
    answer: str = ""  # the final message's whole text (non-streaming responses)


def split_input(messages: list[ChatMessage]) -> tuple[list[ChatMessage], str]:
    """(history, new input): the trailing user messages are the input."""
    cut = len(messages)
    while cut > 0 and messages[cut - 1].role == "user":
        cut -= 1
    if cut == len(messages):
        raise BadRequest("the last message must come from the user", param="messages")
    return messages[:cut], "\n\n".join(m.text() for m in messages[cut:])


def history_messages(history: list[ChatMessage], agent_name: str) -> list[dict[str, Any]]:
    """Earlier turns as AgentMessage dumps (system/tool messages: the agent has its own)."""
    out = []
    for m in history:
        if m.role == "user":
            out.append(dump_message(AgentMessage(sender="user", content=m.text())))
        elif m.role == "assistant":
            out.append(dump_message(AgentMessage(sender=agent_name, content=m.text())))
    return out


def content_text(content: Any) -> str:
    """Message content as a string for OpenAI clients."""
    return content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)


class _Texts:
    """Tracks the text already sent per message so only new characters go out."""

    def __init__(self) -> None:
        self.sent = ""

    def piece(self, content: Any, state: int) -> str:
        if state not in _TEXT_STATES:
            self.sent = ""
            return ""
        text = content_text(content)
        out = text[len(self.sent) :] if text.startswith(self.sent) else text
        self.sent = "" if state == int(AgentStatusCode.END) else text
        return out


async def stateless_pieces(
    state: AppState,
    spec: AgentSpec,
    agent_name: str,
    req: ChatCompletionRequest,
    tenant_id: str | None = None,
    figures: tuple[int | None, int] | None = None,
) -> AsyncIterator[Piece]:
    """Run the agent over the request's messages without storing anything (but its usage).

    ``figures``: the tenant's (budget, used) from ``preflight_tenant`` (read here if omitted).
    """
    check_ready(state, spec)
    history, text = split_input(req.messages)
    agent = state.build_agent(spec, agent_name)
    key = f"stateless:{uuid.uuid4().hex}"
    memory = agent.state_dict(key)
    memory["memory"] = history_messages(history, agent_name)
    agent.load_state_dict(memory, session_id=key)
    texts = _Texts()
    answer = ""
    if tenant_id is not None and figures is None:
        figures = await state.tenant_usage.figures(tenant_id)
    limit, used = figures or (None, 0)
    with (
        usage_scope() as usage,
        budget_scope(RunBudget.build(usage, tenant_limit=limit, tenant_used=used)),
    ):
        try:
            async for chunk in stream_turn(
                agent, AgentMessage(sender="user", content=text), key, req.gen_params()
            ):
                if out := texts.piece(chunk.content, int(chunk.stream_state)):
                    yield Piece(out)
                if int(chunk.stream_state) == int(AgentStatusCode.END):
                    answer = content_text(chunk.content)
        finally:
            if tenant_id is not None:  # the tenant's budget counts stateless runs too
                await state.tenant_usage.charge(
                    tenant_id, usage.total_tokens, limited=limit is not None
                )
    yield Piece(final=True, usage=usage, answer=answer)


async def preflight_tenant(state: AppState, tenant_id: str) -> tuple[int | None, int]:
    """The tenant's (budget, used); 429 ``budget_exceeded`` before anything streams if spent."""
    limit, used = await state.tenant_usage.figures(tenant_id)
    RunBudget.build(Usage(), tenant_limit=limit, tenant_used=used).preflight()
    return limit, used


async def session_submission(
    state: AppState, tenant_id: str, agent: AgentInfo, session_id: str, req: ChatCompletionRequest
) -> Submission:
    """A run on the persistent session ``session_id`` (created on first use)."""
    _, text = split_input(req.messages)
    async with state.sessionmaker() as db, db.begin():
        try:
            row, row_agent = await get_session(db, tenant_id, session_id)
        except NotFound:
            row, row_agent = await create_session(
                db, tenant_id, SessionCreate(agent=agent.name, id=session_id)
            )
        if row_agent.id != agent.id:
            raise BadRequest(
                f"session {session_id!r} belongs to agent {row_agent.name!r}", param="X-Session-Id"
            )
        spec = await agent_spec(db, agent.id, row.agent_version)
        await preflight(db, tenant_id, row.pk, spec.budget)  # 429 budget_exceeded when spent
    check_ready(state, spec)
    return Submission(
        tenant_id=tenant_id,
        session=row,
        agent_name=agent.name,
        spec=spec,
        message={"sender": "user", "content": text},
        strategy="enqueue",
        gen_params=GenParams.model_validate(req.gen_params()).to_kwargs(),
        options={"stream": req.stream, "on_disconnect": "continue", "source": "openai"},
    )


async def run_pieces(state: AppState, run_id: str) -> AsyncIterator[Piece]:
    """A session run's text deltas from its event log, then its end."""
    async for event in state.run_manager.follow(run_id, 0):
        if event.type == "message.delta":
            if event.data.get("stream_state") in _TEXT_STATES and isinstance(
                event.data["delta"], str
            ):
                yield Piece(event.data["delta"])
        elif event.type == "run.completed":
            run = event.data["run"]
            usage = Usage(run["usage"]["prompt_tokens"], run["usage"]["completion_tokens"])
            answer = content_text((run.get("output") or {}).get("content", ""))
            yield Piece(final=True, usage=usage, answer=answer)
        elif event.type in ("run.failed", "run.cancelled", "error"):
            run = event.data.get("run") or {}
            error = event.data.get("error") or run.get("error") or {}
            raise Unavailable(
                f"run {run.get('status', 'failed')}: {error.get('message', '')}".strip(": "),
                code=f"run_{run.get('status', 'failed')}",
            )


def check_ready(state: AppState, spec: AgentSpec) -> None:
    """503 unless the spec's model is loaded."""
    handle = state.models.get(spec.model or "")
    if handle is None or not handle.ready:
        raise Unavailable(f"model {spec.model!r} is not ready", code="model_not_ready")


def completion(model: str, text: str, usage: Usage, finish: str = "stop") -> dict[str, Any]:
    """A whole chat.completion object."""
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
                "logprobs": None,
            }
        ],
        "usage": usage.to_dict(),
    }


async def chunks(
    model: str, pieces: AsyncIterator[Piece], include_usage: bool
) -> AsyncIterator[dict[str, Any]]:
    """chat.completion.chunk objects: role in the first delta only, usage last if asked."""
    base = {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
    }
    if include_usage:
        base["usage"] = None
    yield {
        **base,
        "choices": [
            {
                "index": 0,
                "delta": {"role": "assistant", "content": ""},
                "finish_reason": None,
                "logprobs": None,
            }
        ],
    }
    async for piece in pieces:
        if piece.final:
            yield {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {},
                        "finish_reason": piece.finish_reason,
                        "logprobs": None,
                    }
                ],
            }
            if include_usage:
                yield {**base, "choices": [], "usage": piece.usage.to_dict()}
            return
        if piece.text:
            yield {
                **base,
                "choices": [
                    {
                        "index": 0,
                        "delta": {"content": piece.text},
                        "finish_reason": None,
                        "logprobs": None,
                    }
                ],
            }
