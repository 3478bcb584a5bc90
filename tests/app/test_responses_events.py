"""``ResponseStream`` on run event logs built by hand: a sandboxed Python call as a
``code_interpreter_call`` item, a lost run's gap and end, a cancelled run; every event and the
Response validated against the ``openai`` package's models."""

from __future__ import annotations

from typing import Any

from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from app.services.responses_events import GAP_STRIDE, ResponseStream
from app.services.responses_read import base_of

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
RID = "resp_00112233445566778899aabbccddeeff"


def stream(hold: bool = False) -> ResponseStream:
    return ResponseStream(base_of(RID, 1_800_000_000, {"model": "m"}, "bot"), "bot", hold)


def run(status: str, stop: str | None) -> dict[str, Any]:
    return {
        "status": status,
        "stop_reason": stop,
        "usage": {"prompt_tokens": 3, "completion_tokens": 2},
        "finished_at": "2026-11-27T08:00:00Z",
    }


def feed(mapper: ResponseStream, log: list[tuple[str, dict[str, Any]]]) -> list[dict[str, Any]]:
    out = []
    for type_, data in log:
        out += mapper.feed(type_, data)
    for event in out:
        EVENTS.validate_python(event)
    Response.model_validate(mapper.response)
    return out


def test_a_python_tool_call_is_a_code_interpreter_call() -> None:
    call = {
        "tool_type": "interpreter",
        "thought": "Let me run it.",
        "action": {"name": "IPythonInterpreter", "parameters": {"command": "print(6 * 7)"}},
        "status": 1,
    }
    result = {"type": "IPythonInterpreter", "result": [{"type": "text", "content": "42"}],
              "state": 0, "errmsg": None, "args": {}}  # fmt: skip
    log = [
        ("run.created", {"run": {"status": "running"}}),
        ("message", {"index": 0, "message": {"sender": "bot", "content": "x", "formatted": call}}),
        ("message", {"index": 1, "message": {"sender": "AsyncActionExecutor", "content": "42",
                                             "formatted": result}}),
        ("message", {"index": 2, "message": {"sender": "bot", "content": "It is 42."}}),
        ("run.completed", {"run": run("completed", "end")}),
    ]  # fmt: skip
    mapper = stream(hold=True)
    events = feed(mapper, log)
    items = mapper.response["output"]
    assert [i["type"] for i in items] == ["code_interpreter_call", "message"]
    assert items[0]["code"] == "print(6 * 7)" and items[0]["status"] == "completed"
    assert items[0]["outputs"] == [{"type": "logs", "logs": "42"}]
    assert events[-1]["type"] == "response.completed"


def test_a_lost_run_ends_failed_with_numbers_past_its_gap() -> None:
    log = [
        ("run.created", {"run": {"status": "running"}}),
        ("message.delta", {"index": 0, "sender": "bot", "delta": "Hel", "stream_state": 1}),
        ("run.gap", {"from_id": 3, "to_id": 64, "reason": "server_restart"}),
        ("run.cancelled", {"run": run("interrupted", "server_restart")}),
    ]
    mapper = stream()
    events = feed(mapper, log)
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers)) and numbers[-1] > 64 * GAP_STRIDE
    end = events[-1]
    assert end["type"] == "response.failed" and end["response"]["status"] == "failed"
    assert "restarted" in end["response"]["error"]["message"]
    # The open message ends incomplete, with the text that was streamed.
    message = end["response"]["output"][0]
    assert message["status"] == "incomplete" and message["content"][0]["text"] == "Hel"


def test_a_cancelled_run_is_a_cancelled_response() -> None:
    log = [
        ("run.created", {"run": {"status": "queued"}}),
        ("run.cancelled", {"run": run("cancelled", "cancelled")}),
    ]
    mapper = stream()
    events = feed(mapper, log)
    assert [e["type"] for e in events] == [  # cancelled in the queue: never in progress
        "response.created",
        "response.queued",
        "response.failed",
    ]
    assert events[0]["response"]["status"] == "queued"
    assert events[1]["response"]["status"] == "queued"
    assert events[-1]["response"]["status"] == "cancelled"
    assert events[-1]["response"]["error"] is None
