"""``store: false`` on a raw model with nothing to continue: the model answers in the request,
nothing is stored (no session, no run), as ``/v1/chat/completions`` answers a raw model.

What Codex and other clients that resend their whole history send (``store: false``, no
``previous_response_id``): the model call costs what a chat completion costs, and so does
the answer. Its items and events are the ones a stored run's log maps to (``ResponseStream``;
the item builders and the end fields are ``responses_events``' own), built without the log:
a whole answer is the Response built once from the reply (``whole_response``), a streamed one
its events encoded as they go (``responses_stateless_stream``), both from byte templates.
tests/app/test_responses_stateless.py checks both against the mapper.
The tenant's token budget is checked before (``preflight_tenant``) and during the call and
charged with its usage, as for stateless chat completions.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from agents.chat_agent import tool_call_entries
from agents.llms.base import instructions_scope, usage_scope
from app.engines.base import ModelHandle
from app.errors import public_error
from app.models.encoded import dumps
from app.ops.budget import RunBudget, budget_scope
from app.schemas.responses import ResponseCreate
from app.services.responses import _function_tool as function_tool
from app.services.responses import model_params, sampling
from app.services.responses_events import (
    call_arguments,
    end_response,
    function_call_item,
    message_item,
    text_part,
)
from app.services.responses_input import Input
from app.state import AppState

Budget = tuple[int | None, int]  # the tenant's limit (None: none) and what it used
escape = json.encoder.encode_basestring  # C; a string as ``dumps`` writes it (UTF-8 kept)


@dataclass(slots=True)
class Answer:
    """The model's reply, as it ends."""

    text: str = ""
    calls: list[dict[str, Any]] = field(default_factory=list)  # the backend's call entries
    finish: str = "stop"
    prompt_tokens: int = 0
    completion_tokens: int = 0
    error: dict[str, Any] | None = None  # the call failed (``public_error``)

    def run(self) -> dict[str, Any]:
        """What the mapper reads of a run's terminal event."""
        if self.error is not None:
            status, stop = "failed", "error"
        else:
            status, stop = "completed", "length" if self.finish == "length" else "end"
        usage = {"prompt_tokens": self.prompt_tokens, "completion_tokens": self.completion_tokens}
        return {"status": status, "stop_reason": stop, "usage": usage}


def new_response(
    req: ResponseCreate, response_id: str, created: int | None = None
) -> dict[str, Any]:
    """The Response before the model runs (in progress): ``base_of(response_meta(req))`` of a
    raw model with no session, built directly (tests/app/test_responses_stateless.py)."""
    at = int(time.time()) if created is None else created
    response = {"id": response_id, "object": "response", "created_at": at,
                "status": "in_progress", "model": req.model, "output": []}  # fmt: skip
    response.update(_request_fields(req))
    response["error"] = response["incomplete_details"] = response["usage"] = None
    return response


def _request_fields(req: ResponseCreate) -> dict[str, Any]:
    """What the Response repeats of its request (``instructions`` to ``truncation``)."""
    tools = req.tools
    text = req.text
    if text is None:
        fmt: dict[str, Any] = {"format": {"type": "text"}}
    else:
        fmt = text.model_dump(by_alias=True, exclude_none=True)
        fmt.setdefault("format", {"type": "text"})
    conversation = req.conversation_id()
    return {
        "instructions": req.instructions,
        "tools": [function_tool(t) for t in tools if t.get("type") == "function"] if tools else [],
        "tool_choice": req.tool_choice or "auto",
        "parallel_tool_calls": req.parallel_tool_calls,
        "temperature": req.temperature,
        "top_p": req.top_p,
        "max_output_tokens": req.max_output_tokens,
        "previous_response_id": req.previous_response_id,
        "conversation": {"id": conversation} if conversation else None,
        "metadata": req.metadata or {},
        "text": fmt,
        "background": req.background,
        "prompt_cache_key": req.prompt_cache_key,
        "user": req.user,
        "truncation": "disabled",
    }


def call_params(req: ResponseCreate) -> dict[str, Any]:
    """The model call's parameters (400 naming the field for a tool or ``tool_choice`` that
    cannot be honoured: read before the answer starts, a stream's too)."""
    params = sampling(req)
    if req.tools or req.text is not None:  # (model_params of neither is empty)
        params.update(model_params(req))
    return params


async def generate(
    state: AppState,
    tenant_id: str,
    handle: ModelHandle,
    req: ResponseCreate,
    inp: Input,
    budget: Budget,
    answer: Answer,
    params: dict[str, Any],
) -> AsyncIterator[str]:
    """Run the model (``params``: ``call_params``): its text deltas as they come; ``answer``
    gets the whole reply, its usage, and the error that ended it (the response then fails).
    Closing the iterator stops the model call; the tenant is charged either way."""
    limit, used = budget
    # A tenant's budget: each call reserved and settled in the database (app.ops.token_holds).
    meter = state.tenant_usage.calls(tenant_id) if limit is not None else None
    with usage_scope() as usage:
        scope: AbstractContextManager[Any] = nullcontext()
        if limit is not None:
            run_budget = RunBudget.build(usage, tenant_limit=limit, tenant_used=used, meter=meter)
            scope = budget_scope(run_budget)
        try:
            with scope, instructions_scope(req.instructions):
                async for delta in handle.llm.astream(inp.messages, **params):
                    if delta.extra:
                        answer.calls += delta.extra.get("tool_calls") or []
                    answer.finish = delta.finish_reason or answer.finish
                    if delta.text:
                        answer.text += delta.text
                        yield delta.text
        except Exception as exc:
            answer.error = public_error(exc)
        finally:
            answer.prompt_tokens = usage.prompt_tokens
            answer.completion_tokens = usage.completion_tokens
            if meter is None:  # (a metered call was charged when it ended)
                await state.tenant_usage.charge(
                    tenant_id, usage.total_tokens, limited=limit is not None
                )


def answer_calls(answer: Answer, req: ResponseCreate) -> list[dict[str, Any]]:
    """The reply's function calls (none when it failed: its reply never ended)."""
    if answer.error is not None or not answer.calls:
        return []
    return tool_call_entries(answer.calls, req.parallel_tool_calls)


async def whole_response(
    state: AppState,
    tenant_id: str,
    handle: ModelHandle,
    req: ResponseCreate,
    inp: Input,
    response_id: str,
    budget: Budget,
) -> bytes:
    """The Response, encoded once from the reply (no events)."""
    params = call_params(req)
    created = int(time.time())
    answer = Answer()
    async for _ in generate(state, tenant_id, handle, req, inp, budget, answer, params):
        pass
    finished = time.time()
    if answer.error is None and not answer.calls:
        return plain_body(req, response_id, created, answer, finished)
    return dumps(body_of(req, response_id, created, answer, finished))


def body_of(
    req: ResponseCreate, response_id: str, created: int, answer: Answer, finished: float
) -> dict[str, Any]:
    """The whole Response of ``answer`` (what ``plain_body`` encodes, for any answer)."""
    response = new_response(req, response_id, created)
    suffix, output = response_id.removeprefix("resp_"), response["output"]
    if answer.text:
        status = "completed" if answer.error is None else "incomplete"
        output.append(message_item(f"msg_{suffix}_0", status, [text_part(answer.text)]))
    for call in answer_calls(answer, req):
        item = function_call_item(f"fc_{suffix}_{len(output)}", call, call_arguments(call))
        item["status"] = "completed"
        output.append(item)
    end_response(response, answer.run(), answer.error, finished)
    return response


# A text answer's Response, encoded as ``dumps(body_of(...))`` writes it: its fields the
# request repeats are encoded once per kind of request (``fixed``), the rest spliced in.
_BODY = (
    b'{"id":"%s","object":"response","created_at":%d,"status":"%s","model":%s,"output":[%s],'
    b'%s,"error":null,"incomplete_details":%s,"usage":{"input_tokens":%d,'
    b'"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":%d,'
    b'"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d},"completed_at":%s}'
)
_MESSAGE = (
    b'{"id":"msg_%s_0","type":"message","role":"assistant","status":"completed","content":'
    b'[{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}]}'
)
_CUT = b'{"reason":"max_output_tokens"}'
_FIXED: dict[tuple[Any, ...], tuple[bytes, bytes]] = {}
_FIXED_MAX = 256
_FIXED_INSTRUCTIONS = 2048  # longer instructions are encoded each time (the kept stay small)


def fixed(req: ResponseCreate) -> tuple[bytes, bytes]:
    """The request's model and its fields ``instructions`` to ``truncation``, encoded (kept
    for requests whose fields are all plain values, the same kind of request next time)."""
    choice, temperature, top_p = req.tool_choice, req.temperature, req.top_p
    limit, instructions = req.max_output_tokens, req.instructions
    plain = not (
        (instructions is not None and len(instructions) > _FIXED_INSTRUCTIONS)
        or req.tools
        or req.text is not None
        or req.metadata
        or isinstance(choice, dict)
        or req.conversation is not None
        or req.previous_response_id is not None
    )
    # (types too: 1 and 1.0 are one key but not one encoding)
    key = (req.model, instructions, choice, req.parallel_tool_calls, type(temperature),
           temperature, type(top_p), top_p, type(limit), limit, req.background,
           req.prompt_cache_key, req.user)  # fmt: skip
    if plain and (found := _FIXED.get(key)) is not None:
        return found
    encoded = escape(req.model).encode(), dumps(_request_fields(req))[1:-1]
    if plain:
        if len(_FIXED) >= _FIXED_MAX:
            _FIXED.clear()
        _FIXED[key] = encoded
    return encoded


def plain_body(
    req: ResponseCreate, response_id: str, created: int, answer: Answer, finished: float
) -> bytes:
    """``dumps(body_of(...))`` of an answer without calls or error, spliced from templates."""
    model, fields = fixed(req)
    suffix = response_id.removeprefix("resp_").encode()
    text = _MESSAGE % (suffix, escape(answer.text).encode()) if answer.text else b""
    cut = answer.finish == "length"
    prompt, completion = answer.prompt_tokens, answer.completion_tokens
    return _BODY % (
        response_id.encode(),
        created,
        b"incomplete" if cut else b"completed",
        model,
        text,
        fields,
        _CUT if cut else b"null",
        prompt,
        completion,
        prompt + completion,
        float.__repr__(finished).encode(),
    )
