"""``store: false`` on a raw model with nothing to continue: the model answers in the request,
nothing is stored (no session, no run), as ``/v1/chat/completions`` answers a raw model.

What Codex and other clients that resend their whole history send (``store: false``, no
``previous_response_id``): the model call costs what a chat completion costs, and so does
the answer. Its items and events are the ones a stored run's log maps to (``ResponseStream``;
the item builders and the end fields are ``responses_events``' own), built without the log:
a whole answer is the Response built once from the reply (``whole_response``), a streamed one
the events encoded as they go, the text deltas spliced into bytes encoded once
(``stream_frames``). tests/app/test_responses_stateless.py checks both against the mapper.
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
# A text delta's frame around its number, its item and its text (encoded once).
_DELTA_HEAD = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":'
)
_DELTA_TAIL = b',"logprobs":[]}\n\n'
# The Response's fields an answer changes (``end_response``): the others, its request's, are
# encoded once per answer (``_Snapshots``), not once per copy of it in the stream.
_CHANGING = frozenset({"status", "output", "error", "incomplete_details", "usage", "completed_at"})


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


def _calls(answer: Answer, req: ResponseCreate) -> list[dict[str, Any]]:
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
    for call in _calls(answer, req):
        item = function_call_item(f"fc_{suffix}_{len(output)}", call, call_arguments(call))
        item["status"] = "completed"
        output.append(item)
    end_response(response, answer.run(), answer.error, finished)
    return response


# A text answer's Response, encoded as ``dumps(body_of(...))`` writes it: its fields the
# request repeats are encoded once per kind of request (``_fixed``), the rest spliced in.
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


def _fixed(req: ResponseCreate) -> tuple[bytes, bytes]:
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
    model, fields = _fixed(req)
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


def _event(type_: bytes, seq: int, rest: bytes) -> bytes:
    """One SSE frame of an event whose fields after its number are ``rest`` (encoded, without
    braces): what ``sse.frame(dumps(event), event=type)`` writes."""
    return b'event: %s\ndata: {"type":"%s","sequence_number":%d,%s}\n\n' % (type_, type_, seq, rest)


def _frame(type_: str, seq: int, fields: dict[str, Any]) -> bytes:
    """One SSE frame of an event."""
    return _event(type_.encode(), seq, dumps(fields)[1:-1])


class _Snapshots:
    """A Response encoded as the stream carries it (created, in progress, its end): the
    request's fields encoded once, then per copy only what the answer changed."""

    def __init__(self, response: dict[str, Any]) -> None:
        fixed = {k: v for k, v in response.items() if k not in _CHANGING}
        self.head = dumps(fixed)[:-1]  # b'{...' (a Response always has its id)

    def of(self, response: dict[str, Any], items: list[bytes]) -> bytes:
        """``response`` encoded; ``items``: its output items, encoded."""
        rest = {k: v for k, v in response.items() if k in _CHANGING and k != "output"}
        return b'%s,"output":[%s],%s' % (self.head, b",".join(items), dumps(rest)[1:])


def stream_frames(
    state: AppState,
    tenant_id: str,
    handle: ModelHandle,
    req: ResponseCreate,
    inp: Input,
    response_id: str,
    budget: Budget,
) -> AsyncIterator[bytes]:
    """The response's stream as SSE frames: OpenAI's events, as ``ResponseStream`` maps a run
    of the raw model; the model runs as they are read. Its parameters are read now: a bad
    tool is a 400, not an ``error`` event after the headers."""
    params = call_params(req)
    return _frames(state, tenant_id, handle, req, inp, response_id, budget, params)


async def _frames(
    state: AppState,
    tenant_id: str,
    handle: ModelHandle,
    req: ResponseCreate,
    inp: Input,
    response_id: str,
    budget: Budget,
    params: dict[str, Any],
) -> AsyncIterator[bytes]:
    response = new_response(req, response_id)
    suffix, output = response_id.removeprefix("resp_"), response["output"]
    snapshots = _Snapshots(response)
    snapshot = b'"response":%s' % snapshots.of(response, [])  # created and in progress
    yield _event(b"response.created", 0, snapshot) + _event(b"response.in_progress", 1, snapshot)
    seq = 1
    answer = Answer()
    item_id = f"msg_{suffix}_0"
    where = b',"item_id":"%s","output_index":0,"content_index":0,"delta":' % item_id.encode()
    # Events made together are sent together (one write: each goes through the middleware).
    async for text in generate(state, tenant_id, handle, req, inp, budget, answer, params):
        opening = b""
        if not output:  # the message opens with its first text
            item = message_item(item_id, "in_progress", [])
            output.append(item)
            part = {"item_id": item_id, "output_index": 0, "content_index": 0,
                    "part": text_part("")}  # fmt: skip
            opening = _frame(
                "response.output_item.added", seq + 1, {"output_index": 0, "item": item}
            ) + _frame("response.content_part.added", seq + 2, part)
            seq += 2
        seq += 1
        yield b"%s%s%d%s%s%s" % (
            opening,
            _DELTA_HEAD,
            seq,
            where,
            escape(text).encode(),
            _DELTA_TAIL,
        )
    frames: list[bytes] = []  # the end, sent at once
    add = frames.append
    items: list[bytes] = []  # the output items as they end, encoded once
    if output:  # the message ends: completed, or incomplete when the call failed
        part = text_part(answer.text)
        item = message_item(item_id, "completed" if answer.error is None else "incomplete", [part])
        output[0] = item
        items.append(dumps(item))
        at = b'"item_id":"%s","output_index":0,"content_index":0' % item_id.encode()
        whole = escape(answer.text).encode()
        add(_event(b"response.output_text.done", seq + 1,
                   b'%s,"text":%s,"logprobs":[]' % (at, whole)))  # fmt: skip
        add(_event(b"response.content_part.done", seq + 2, b'%s,"part":%s' % (at, dumps(part))))
        add(_event(b"response.output_item.done", seq + 3,
                   b'"output_index":0,"item":%s' % items[-1]))  # fmt: skip
        seq += 3
    for call in _calls(answer, req):
        index, arguments = len(output), call_arguments(call)
        item = function_call_item(f"fc_{suffix}_{index}", call, "")
        add(_frame("response.output_item.added", seq + 1, {"output_index": index, "item": item}))
        at_fields = {"item_id": item["id"], "output_index": index}
        add(_frame("response.function_call_arguments.delta", seq + 2,
                   {**at_fields, "delta": arguments}))  # fmt: skip
        item = {**item, "arguments": arguments, "status": "completed"}
        output.append(item)
        items.append(dumps(item))
        add(_frame("response.function_call_arguments.done", seq + 3,
                   {**at_fields, "name": item["name"], "arguments": arguments}))  # fmt: skip
        add(_event(b"response.output_item.done", seq + 4,
                   b'"output_index":%d,"item":%s' % (index, items[-1])))  # fmt: skip
        seq += 4
    terminal = end_response(response, answer.run(), answer.error, time.time())
    add(_event(terminal.encode(), seq + 1, b'"response":%s' % snapshots.of(response, items)))
    yield b"".join(frames)
