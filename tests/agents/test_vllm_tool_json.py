"""Forced tool calls are strict JSON even when the grammar let a raw control character through.

vLLM's JSON grammar (xgrammar) admits raw U+0000-U+001F (but CR, LF) inside strings; the demo
model on some CPUs puts one in a ``required`` call's argument. It was read as no call at all
(content, finish_reason "stop"): tests/vllm/test_chat.py's
test_required_tool_choice_returns_valid_calls.
"""

from __future__ import annotations

import json
from typing import Any

from agents.llms.vllm_tools import StrictJSON, ToolStream

RAW = '[{"name": "get_weather", "parameters": {"city": "Os\tlo \\"x\\\\", "unit": "C"}}]'


def feed_in_pieces(stream: ToolStream, text: str, size: int) -> list[dict[str, Any]]:
    deltas = []
    for i in range(0, len(text), size):
        deltas += stream.feed(text[i : i + size])
    return deltas + stream.finish()


def test_a_required_call_with_a_raw_tab_is_a_call_with_strict_arguments() -> None:
    for size in (1, 3, 7, len(RAW)):  # escapes and quotes split across pieces
        stream = ToolStream("required")
        (delta,) = feed_in_pieces(stream, RAW, size)
        (call,) = delta["tool_calls"]
        assert call["function"]["name"] == "get_weather"
        arguments = json.loads(call["function"]["arguments"])  # strict: no raw control chars
        assert arguments == {"city": 'Os\tlo "x\\', "unit": "C"}


def test_a_named_call_streams_strict_arguments() -> None:
    text = '{"city": "a\x0bb", "unit": "F"}'
    stream = ToolStream("named", function_name="get_weather")
    deltas = feed_in_pieces(stream, text, 2)
    streamed = "".join(c["function"]["arguments"] for d in deltas for c in d["tool_calls"])
    assert json.loads(streamed) == {"city": "a\x0bb", "unit": "F"}
    assert stream.calls[0]["function"]["arguments"] == streamed


def test_text_outside_strings_is_untouched() -> None:
    strict = StrictJSON()
    assert strict.feed('{"a":\t[1, "\t"]}') == '{"a":\t[1, "\\u0009"]}'


def test_json_schema_content_is_strict_json() -> None:
    """``response_format`` json_schema (or json_object) without tools: the answer is generated
    under the same JSON grammar, so a raw control character in a string is escaped too."""
    text = '{"name": "a\tb\x01", "n": [1,\t2]}'
    for size in (1, 4, len(text)):
        stream = ToolStream("none", json_content=True)
        deltas = feed_in_pieces(stream, text, size)
        content = "".join(d["content"] for d in deltas)
        assert json.loads(content) == {"name": "a\tb\x01", "n": [1, 2]}
    plain = ToolStream("none")  # a text answer is left as the model wrote it
    assert "".join(d["content"] for d in feed_in_pieces(plain, "a\tb", 1)) == "a\tb"


def test_the_engine_streams_a_json_format_answer_strictly() -> None:
    from types import SimpleNamespace

    from app.engines.vllm_chat import VllmChatBackend

    backend = VllmChatBackend.__new__(VllmChatBackend)
    backend.tool_call_parser = None
    for fmt, strict in (("json_schema", True), ("json_object", True), ("text", False)):
        request = SimpleNamespace(response_format=SimpleNamespace(type=fmt))
        plan = SimpleNamespace(mode="none", function_name="", vllm_request=request)
        assert backend._tool_stream(plan).json_content is strict  # type: ignore[arg-type]
