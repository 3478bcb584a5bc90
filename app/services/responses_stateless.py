"""``store: false`` on a raw model with nothing to continue: the model answers in the request,
nothing is stored (no session, no run), as ``/v1/chat/completions`` answers a raw model.

What Codex and other clients that resend their whole history send (``store: false``, no
``previous_response_id``): the model call costs what a chat completion costs. The answer's
items and events come from the same mapping as a stored run's (``ResponseStream``), fed the
events such a run would log. The tenant's token budget is checked before and during the call
and charged with its usage, as for stateless chat completions.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from contextlib import ExitStack
from datetime import UTC, datetime
from typing import Any

from agents.chat_agent import reply_message
from agents.llms.base import instructions_scope, usage_scope
from agents.schema import AgentStatusCode
from app.engines.base import ModelHandle
from app.errors import public_error
from app.ops.budget import RunBudget, budget_scope
from app.runtime.messages import dump_message
from app.schemas.responses import ResponseCreate
from app.schemas.vocab import EventType
from app.services.chat import preflight_tenant
from app.services.responses import model_params, response_meta, sampling
from app.services.responses_events import ResponseStream
from app.services.responses_input import Input
from app.services.responses_read import base_of
from app.state import AppState

_STREAMING = int(AgentStatusCode.STREAM_ING)


async def stateless_events(
    state: AppState,
    tenant_id: str,
    handle: ModelHandle,
    req: ResponseCreate,
    inp: Input,
    response_id: str,
    quiet: bool = False,
) -> AsyncIterator[dict[str, Any]]:
    """The response's stream events (the last one terminal, with the Response); the model
    runs as they are read (closing the iterator stops the model call). ``quiet``: only the
    terminal event's Response is wanted."""
    limit, used = await preflight_tenant(state, tenant_id)  # 429 before anything runs
    meta = response_meta(req, None, None)
    base = base_of(response_id, int(time.time()), meta, req.model)
    stream = ResponseStream(base, req.model, False, quiet)
    for event in stream.feed(EventType.RUN_CREATED, {"run": {"status": "running"}}):
        yield event
    params = {**sampling(req), **model_params(req)}
    text, finish = "", "stop"
    calls: list[dict[str, Any]] = []
    # A tenant's budget: each call reserved and settled in the database (app.ops.token_holds).
    meter = state.tenant_usage.calls(tenant_id) if limit is not None else None
    with usage_scope() as usage, ExitStack() as scopes:
        if limit is not None:
            budget = RunBudget.build(usage, tenant_limit=limit, tenant_used=used, meter=meter)
            scopes.enter_context(budget_scope(budget))
        scopes.enter_context(instructions_scope(req.instructions))
        try:
            async for delta in handle.llm.astream(inp.messages, **params):
                calls += delta.extra.get("tool_calls") or []
                finish = delta.finish_reason or finish
                if delta.text:
                    text += delta.text
                    data = {"index": 0, "sender": req.model, "delta": delta.text,
                            "stream_state": _STREAMING}  # fmt: skip
                    for event in stream.feed(EventType.MESSAGE_DELTA, data):
                        yield event
        except Exception as exc:
            run = _run("failed", "error", usage.prompt_tokens, usage.completion_tokens)
            data = {"run": run, "error": public_error(exc)}
            for event in stream.feed(EventType.RUN_FAILED, data):
                yield event
            return
        finally:
            if meter is None:  # (a metered call was charged when it ended)
                await state.tenant_usage.charge(
                    tenant_id, usage.total_tokens, limited=limit is not None
                )
    reply = reply_message(req.model, text, calls, req.parallel_tool_calls)
    for event in stream.feed(EventType.MESSAGE, {"index": 0, "message": dump_message(reply)}):
        yield event
    stop = "length" if finish == "length" else "end"
    run = _run("completed", stop, usage.prompt_tokens, usage.completion_tokens)
    for event in stream.feed(EventType.RUN_COMPLETED, {"run": run}):
        yield event


def _run(status: str, stop: str, prompt: int, completion: int) -> dict[str, Any]:
    """What the mapper reads of a run's terminal event."""
    return {
        "status": status,
        "stop_reason": stop,
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
        "finished_at": datetime.now(UTC).isoformat(),
    }
