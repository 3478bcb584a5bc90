"""A ``store: false`` answer's stream (``responses_stateless``): OpenAI's events as SSE frames,
as ``ResponseStream`` maps a run of the raw model, written from byte templates.

The stream carries the Response three times (``response.created``, ``response.in_progress``
and the terminal event): its request's fields are encoded once per kind of request
(``responses_stateless.fixed``, as the whole answer's), the rest of each copy spliced in. The
events of a text answer (no function call, no failure: what a streamed turn of a client that
resends its history is) are spliced from templates with the text escaped once; an answer with
calls or an error ends with its events built field by field and ``dumps`` (``_built_end``).

A copy of the Response in the stream writes its request's fields first, then ``output``,
``status``, ``error``, ``incomplete_details``, ``usage`` (and ``completed_at``): what the
stream always wrote. tests/app/test_responses_stream_bytes.py checks the frames byte for byte
against events built field by field, the copies against the whole answer's Response, and
every event against the ``openai`` package's models.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from app.engines.base import ModelHandle
from app.models.encoded import dumps
from app.schemas.responses import ResponseCreate
from app.services.responses_events import (
    call_arguments,
    end_response,
    function_call_item,
    message_item,
    text_part,
)
from app.services.responses_input import Input
from app.services.responses_stateless import (
    Answer,
    Budget,
    answer_calls,
    call_params,
    fixed,
    generate,
)
from app.state import AppState

escape = json.encoder.encode_basestring  # C; a string as ``dumps`` writes it (UTF-8 kept)

# A copy of the Response up to its output's items: id, created_at, model, request fields.
_HEAD = b'{"id":"%s","object":"response","created_at":%d,"model":%s,%s,"output":['
_STARTED = (
    b'event: response.created\ndata: {"type":"response.created","sequence_number":0,'
    b'"response":%s],"status":"in_progress","error":null,"incomplete_details":null,'
    b'"usage":null}}\n\n'
    b'event: response.in_progress\ndata: {"type":"response.in_progress","sequence_number":1,'
    b'"response":%s],"status":"in_progress","error":null,"incomplete_details":null,'
    b'"usage":null}}\n\n'
)
# The message item opens with the first text (always output 0, events 2 and 3).
_OPENING = (
    b'event: response.output_item.added\ndata: {"type":"response.output_item.added",'
    b'"sequence_number":2,"output_index":0,"item":{"id":"%s","type":"message",'
    b'"role":"assistant","status":"in_progress","content":[]}}\n\n'
    b'event: response.content_part.added\ndata: {"type":"response.content_part.added",'
    b'"sequence_number":3,"item_id":"%s","output_index":0,"content_index":0,'
    b'"part":{"type":"output_text","text":"","annotations":[],"logprobs":[]}}\n\n'
)
# A text delta: the stream's item id filled in once (``%%`` stays for its number and text).
_DELTA = (
    b'event: response.output_text.delta\ndata: {"type":"response.output_text.delta",'
    b'"sequence_number":%%d,"item_id":"%s","output_index":0,"content_index":0,"delta":%%s,'
    b'"logprobs":[]}\n\n'
)
_ITEM = (
    b'{"id":"%s","type":"message","role":"assistant","status":"completed","content":'
    b'[{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}]}'
)
_TEXT_END = (
    b'event: response.output_text.done\ndata: {"type":"response.output_text.done",'
    b'"sequence_number":%d,"item_id":"%s","output_index":0,"content_index":0,"text":%s,'
    b'"logprobs":[]}\n\n'
    b'event: response.content_part.done\ndata: {"type":"response.content_part.done",'
    b'"sequence_number":%d,"item_id":"%s","output_index":0,"content_index":0,'
    b'"part":{"type":"output_text","text":%s,"annotations":[],"logprobs":[]}}\n\n'
    b'event: response.output_item.done\ndata: {"type":"response.output_item.done",'
    b'"sequence_number":%d,"output_index":0,"item":%s}\n\n'
)
_TERMINAL = (
    b'event: %s\ndata: {"type":"%s","sequence_number":%d,"response":%s%s],"status":"%s",'
    b'"error":null,"incomplete_details":%s,"usage":{"input_tokens":%d,'
    b'"input_tokens_details":{"cached_tokens":0,"cache_write_tokens":0},"output_tokens":%d,'
    b'"output_tokens_details":{"reasoning_tokens":0},"total_tokens":%d},"completed_at":%s}}\n\n'
)
_CUT = b'{"reason":"max_output_tokens"}'


def _event(type_: bytes, seq: int, rest: bytes) -> bytes:
    """One SSE frame of an event whose fields after its number are ``rest`` (encoded, without
    braces): what ``sse.frame(dumps(event), event=type)`` writes."""
    return b'event: %s\ndata: {"type":"%s","sequence_number":%d,%s}\n\n' % (type_, type_, seq, rest)


def _frame(type_: str, seq: int, fields: dict[str, Any]) -> bytes:
    """One SSE frame of an event."""
    return _event(type_.encode(), seq, dumps(fields)[1:-1])


class Frames:
    """The frames of one stream (its id, creation time and request's fields encoded once)."""

    __slots__ = ("delta", "head", "item_id", "suffix")

    def __init__(self, response_id: str, created: int, model: bytes, fields: bytes) -> None:
        self.head = _HEAD % (response_id.encode(), created, model, fields)
        self.suffix = response_id.removeprefix("resp_")
        self.item_id = b"msg_%s_0" % self.suffix.encode()  # (ids are hex: no ``%``)
        self.delta = _DELTA % self.item_id  # ``self.delta % (seq, escaped text)``

    def started(self) -> bytes:
        """``response.created`` and ``response.in_progress`` (events 0 and 1)."""
        return _STARTED % (self.head, self.head)

    def opening(self) -> bytes:
        """The message item's opening, before its first text (events 2 and 3)."""
        return _OPENING % (self.item_id, self.item_id)

    def end(self, answer: Answer, calls: list[dict[str, Any]], seq: int, finished: float) -> bytes:
        """The stream's end after event ``seq`` (``calls``: ``answer_calls``), in one piece:
        the message's end if it opened (``answer.text``), the calls, the terminal event."""
        if answer.error is not None or calls:
            return self._built_end(answer, calls, seq, finished)
        item = b""
        out = b""
        if answer.text:
            text = escape(answer.text).encode()
            item_id = self.item_id
            item = _ITEM % (item_id, text)
            out = _TEXT_END % (seq + 1, item_id, text, seq + 2, item_id, text, seq + 3, item)
            seq += 3
        prompt, completion = answer.prompt_tokens, answer.completion_tokens
        if answer.finish == "length":
            kind, status, details = b"response.incomplete", b"incomplete", _CUT
        else:
            kind, status, details = b"response.completed", b"completed", b"null"
        return out + _TERMINAL % (
            kind,
            kind,
            seq + 1,
            self.head,
            item,
            status,
            details,
            prompt,
            completion,
            prompt + completion,
            float.__repr__(finished).encode(),
        )

    def _built_end(
        self, answer: Answer, calls: list[dict[str, Any]], seq: int, finished: float
    ) -> bytes:
        """``end`` of an answer with calls or an error: its events built field by field."""
        frames: list[bytes] = []
        add = frames.append
        items: list[bytes] = []  # the output items as they end, encoded once
        if answer.text:  # the message ends: completed, or incomplete when the call failed
            part = text_part(answer.text)
            item_id = self.item_id.decode()
            status = "completed" if answer.error is None else "incomplete"
            items.append(dumps(message_item(item_id, status, [part])))
            at = b'"item_id":"%s","output_index":0,"content_index":0' % self.item_id
            whole = escape(answer.text).encode()
            add(_event(b"response.output_text.done", seq + 1,
                       b'%s,"text":%s,"logprobs":[]' % (at, whole)))  # fmt: skip
            add(_event(b"response.content_part.done", seq + 2,
                       b'%s,"part":%s' % (at, dumps(part))))  # fmt: skip
            add(_event(b"response.output_item.done", seq + 3,
                       b'"output_index":0,"item":%s' % items[-1]))  # fmt: skip
            seq += 3
        for call in calls:
            index, arguments = len(items), call_arguments(call)
            item = function_call_item(f"fc_{self.suffix}_{index}", call, "")
            add(
                _frame("response.output_item.added", seq + 1, {"output_index": index, "item": item})
            )
            at_fields = {"item_id": item["id"], "output_index": index}
            add(_frame("response.function_call_arguments.delta", seq + 2,
                       {**at_fields, "delta": arguments}))  # fmt: skip
            item = {**item, "arguments": arguments, "status": "completed"}
            items.append(dumps(item))
            add(_frame("response.function_call_arguments.done", seq + 3,
                       {**at_fields, "name": item["name"], "arguments": arguments}))  # fmt: skip
            add(_event(b"response.output_item.done", seq + 4,
                       b'"output_index":%d,"item":%s' % (index, items[-1])))  # fmt: skip
            seq += 4
        # The Response's fields the end changes, in the order a copy writes them.
        rest: dict[str, Any] = {"status": "in_progress", "error": None,
                                "incomplete_details": None, "usage": None}  # fmt: skip
        terminal = end_response(rest, answer.run(), answer.error, finished)
        copy = b"%s%s],%s" % (self.head, b",".join(items), dumps(rest)[1:])
        add(_event(terminal.encode(), seq + 1, b'"response":%s' % copy))
        return b"".join(frames)


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
    model, fields = fixed(req)
    frames = Frames(response_id, int(time.time()), model, fields)
    yield frames.started()
    seq = 1
    answer = Answer()
    delta = frames.delta
    # Events made together are sent together (one write: each goes through the middleware).
    async for text in generate(state, tenant_id, handle, req, inp, budget, answer, params):
        if seq == 1:  # the message opens with its first text
            seq = 4
            yield frames.opening() + delta % (4, escape(text).encode())
        else:
            seq += 1
            yield delta % (seq, escape(text).encode())
    yield frames.end(answer, answer_calls(answer, req), seq, time.time())
