"""``tool_choice: auto``: the model's own tool-call syntax read by its vLLM tool-call parser."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents.llms.vllm_tools import ToolStream
from app.engines.vllm import VllmHandle

pytestmark = pytest.mark.vllm

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
        },
    }
]
CALL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>'


def hermes_stream(handle: VllmHandle) -> ToolStream:
    from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    from vllm.tool_parsers import ToolParserManager

    request = ChatCompletionRequest.model_validate(
        {"model": "demo", "messages": [{"role": "user", "content": "hi"}], "tools": TOOLS}
    )
    parser = ToolParserManager.get_tool_parser("hermes")(
        handle.llm.engine.tokenizer(), request.tools
    )
    return ToolStream("auto", parser=parser, vllm_request=request)


def feed_in_pieces(stream: ToolStream, text: str, size: int = 5) -> list[dict[str, Any]]:
    deltas = []
    for i in range(0, len(text), size):
        deltas += stream.feed(text[i : i + size])
    return deltas + stream.finish()


def test_a_call_after_text_streams_the_text_then_the_call(vllm_handle: VllmHandle) -> None:
    stream = hermes_stream(vllm_handle)
    deltas = feed_in_pieces(stream, "Let me check.\n" + CALL)
    content = "".join(d.get("content", "") for d in deltas)
    calls = [c for d in deltas for c in d.get("tool_calls", [])]
    assert content.strip() == "Let me check."
    (call,) = calls
    assert call["index"] == 0 and call["type"] == "function" and call["id"]
    assert call["function"]["name"] == "get_weather"
    assert json.loads(call["function"]["arguments"]) == {"city": "Oslo"}
    assert stream.calls and stream.calls[0]["function"]["name"] == "get_weather"


def test_text_without_a_call_is_all_content(vllm_handle: VllmHandle) -> None:
    text = "No tools needed <tool here, just text."
    stream = hermes_stream(vllm_handle)
    deltas = feed_in_pieces(stream, text, size=3)
    assert "".join(d["content"] for d in deltas) == text
    stream.parse()
    assert not stream.calls and stream.content == text
