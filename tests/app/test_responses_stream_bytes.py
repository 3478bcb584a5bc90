"""A ``store: false`` stream is written from byte templates (``responses_stateless_stream``).
Its frames must be, byte for byte, what encoding its events field by field writes (each event
a dict, ``event_frame(type, dumps(event))``), every event must validate against the ``openai``
package's ``ResponseStreamEvent``, and the stream's copies of the Response (created, in
progress, the terminal event's) must be the Response the answer is: ``new_response`` before
the model runs, ``body_of`` (what the JSON answer encodes) at the end."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.api.sse import event_frame
from app.main import create_app
from app.models.encoded import dumps
from app.schemas.responses import ResponseCreate
from app.services.responses_stateless import Answer, answer_calls, body_of, fixed, new_response
from app.services.responses_stateless_stream import Frames, escape
from app.settings import Settings
from tests.app.conftest import parse_sse
from tests.app.test_responses import valid, valid_events
from tests.app.test_responses_tools import TOOL_MODELS, WEATHER
from tests.lifespan import LifespanManager

# A copy of the Response in the stream: these fields last, in this order (the rest first).
_END = ("output", "status", "error", "incomplete_details", "usage", "completed_at")
_TERMINAL = {"completed": "response.completed", "incomplete": "response.incomplete"}


def _copy(response: dict[str, Any]) -> dict[str, Any]:
    first = {k: v for k, v in response.items() if k not in _END}
    return {**first, **{k: response[k] for k in _END if k in response}}


def _reference(
    req: ResponseCreate, rid: str, created: int, answer: Answer, deltas: list[str], at: float
) -> list[dict[str, Any]]:
    """The stream's events built field by field, as ``ResponseStream`` maps such a run."""
    events: list[dict[str, Any]] = []

    def add(type_: str, **fields: Any) -> None:
        events.append({"type": type_, "sequence_number": len(events), **fields})

    start = _copy(new_response(req, rid, created))
    add("response.created", response=start)
    add("response.in_progress", response=start)
    whole = body_of(req, rid, created, answer, at)
    output = whole["output"]
    if deltas:
        item = output[0]
        opened = {**item, "status": "in_progress", "content": []}
        add("response.output_item.added", output_index=0, item=opened)
        at_0 = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        part = item["content"][0]
        add("response.content_part.added", **at_0, part={**part, "text": ""})
        for delta in deltas:
            add("response.output_text.delta", **at_0, delta=delta, logprobs=[])
        add("response.output_text.done", **at_0, text=part["text"], logprobs=[])
        add("response.content_part.done", **at_0, part=part)
        add("response.output_item.done", output_index=0, item=item)
    for index, item in enumerate(output):
        if item["type"] != "function_call":
            continue
        add("response.output_item.added", output_index=index,
            item={**item, "arguments": "", "status": "in_progress"})  # fmt: skip
        at_i = {"item_id": item["id"], "output_index": index}
        add("response.function_call_arguments.delta", **at_i, delta=item["arguments"])
        add("response.function_call_arguments.done", **at_i, name=item["name"],
            arguments=item["arguments"])  # fmt: skip
        add("response.output_item.done", output_index=index, item=item)
    add(_TERMINAL.get(whole["status"], "response.failed"), response=_copy(whole))
    return events


def _encoded(events: list[dict[str, Any]]) -> bytes:
    return b"".join(event_frame(e["type"], dumps(e)) for e in events)


def _streamed(frames: Frames, answer: Answer, deltas: list[str], calls: Any, at: float) -> bytes:
    """The frames ``_frames`` writes for these deltas and this end."""
    out, seq = [frames.started()], 1
    for delta in deltas:
        text = escape(delta).encode()
        if seq == 1:
            seq = 4
            out.append(frames.opening() + frames.delta % (seq, text))
        else:
            seq += 1
            out.append(frames.delta % (seq, text))
    out.append(frames.end(answer, calls, seq, at))
    return b"".join(out)


REQUESTS = [
    {"model": "echo", "input": "hi"},
    {"model": "echo", "input": "hi", "instructions": 'Be "brief" é\n☃', "temperature": 1,
     "top_p": 0.5, "max_output_tokens": 7, "user": "u", "prompt_cache_key": "k",
     "tool_choice": "none", "parallel_tool_calls": False},
    {"model": "echo", "input": "hi", "temperature": 1.0},
    {"model": "echo", "input": "hi", "metadata": {"k": "v"}, "conversation": None,
     "text": {"format": {"type": "json_object"}}, "tools": [WEATHER, {"type": "web_search"}]},
    {"model": "twice", "input": "hi", "tools": [WEATHER], "parallel_tool_calls": False},
]  # fmt: skip
DELTAS = [[], ["one "], ["one ", "two"], ['a "quoted" \\ ', "é ☃ \n", "line\t\u2028"]]
CALLS = [{"id": "call_1", "type": "function",
          "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}]  # fmt: skip


@pytest.mark.parametrize("deltas", DELTAS)
@pytest.mark.parametrize("end", ["stop", "length", "error", "calls"])
def test_the_templates_write_what_the_events_encode(deltas: list[str], end: str) -> None:
    """Each kind of request (twice: the kept encoding read back), text answers whole and cut,
    a failed call, function calls: the frames are the events' encoding, byte for byte."""
    rid = "resp_0123456789abcdef0123456789abcdef"
    for body in REQUESTS * 2:
        req = ResponseCreate.model_validate({**body, "store": False, "stream": True})
        answer = Answer(text="".join(deltas), finish="length" if end == "length" else "stop",
                        prompt_tokens=3, completion_tokens=len(deltas))  # fmt: skip
        if end == "error":
            answer.error = {"code": "server_error", "message": 'the "model" failed'}
        if end == "calls":
            answer.calls = [dict(c) for c in CALLS]
        at = 1795926731.7328777
        frames = Frames(rid, 17, *fixed(req))
        ours = _streamed(frames, answer, deltas, answer_calls(answer, req), at)
        events = _reference(req, rid, 17, answer, deltas, at)
        assert ours == _encoded(events)
        valid_events(ours.decode())  # each event, and the openai package's accumulator
        valid(events[-1]["response"])


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    application = create_app(settings_factory(models=json.dumps(TOOL_MODELS)))
    async with LifespanManager(application):
        yield application


SERVED = [
    {"model": "echo", "input": "one two three"},
    {"model": "echo", "input": 'a "quoted" \\ é ☃ \n line'},
    {"model": "echo", "input": "one two three four", "max_output_tokens": 2},
    {"model": "echo", "input": "hi", "instructions": "x", "metadata": {"k": "v"},
     "temperature": 0.5},
    {"model": "twice", "input": "Weather?", "tools": [WEATHER]},
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(SERVED)))
async def test_a_served_stream_is_its_events_encoding_and_its_copies_the_response(
    client: httpx.AsyncClient, case: int
) -> None:
    """Served (the real loop over the model's deltas): the bytes are the events built field by
    field from what the stream says (its id, times, text, usage), each event valid; the
    copies of the Response are the Response before and after, the terminal one the Response
    the JSON answer encodes (``body_of``)."""
    body = {**SERVED[case], "store": False}
    req = ResponseCreate.model_validate({**body, "stream": True})
    for _ in range(2):  # the second: the kept encoding of this kind of request
        raw = await client.post("/v1/responses", json={**body, "stream": True})
        assert raw.status_code == 200, raw.text
        assert "X-Session-Id" not in raw.headers
        events = valid_events(raw.text)
        assert [f["event"] for f in parse_sse(raw.text)] == [e["type"] for e in events]
        final = events[-1]["response"]
        deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
        usage = final["usage"]
        answer = Answer(
            text="".join(deltas),
            finish="length" if final["status"] == "incomplete" else "stop",
            prompt_tokens=usage["input_tokens"],
            completion_tokens=usage["output_tokens"],
        )
        for item in final["output"]:
            if item["type"] == "function_call":
                answer.calls.append({"id": item["call_id"], "type": "function",
                                     "function": {"name": item["name"],
                                                  "arguments": item["arguments"]}})  # fmt: skip
        rid, created, at = final["id"], final["created_at"], final["completed_at"]
        reference = _reference(req, rid, created, answer, deltas, at)
        assert raw.content == _encoded(reference)
        # The copies: in progress before the model ran, the whole answer's Response at the end.
        start = new_response(req, rid, created)
        assert events[0]["response"] == events[1]["response"] == start
        assert final == body_of(req, rid, created, answer, at)
        assert final["status"] == ("incomplete" if case == 2 else "completed")
        valid(events[0]["response"])
        valid(final)
