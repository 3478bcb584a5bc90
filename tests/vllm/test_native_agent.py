"""A native tool agent on the real engine: tools via the chat template, calls parsed."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents.actions import AsyncActionExecutor, BaseAction
from agents.native import NativeToolFormat
from agents.schema import AgentStatusCode
from agents.tool_agent import AsyncToolAgent
from app.engines.vllm import VllmHandle

pytestmark = pytest.mark.vllm


class Ping(BaseAction):
    """Answers pong."""

    def run(self) -> str:
        """Answers pong."""
        return "pong-4711"


async def test_a_forced_native_call_runs_the_tool_and_the_result_reaches_the_model(
    vllm_handle: VllmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = vllm_handle.llm
    calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []
    astream = llm.astream

    def recording(messages: list[dict[str, Any]], **kwargs: Any) -> AsyncIterator[Any]:
        calls.append((messages, kwargs))
        return astream(messages, **kwargs)

    monkeypatch.setattr(llm, "astream", recording)
    # The random demo model never chooses a tool itself: force one (structured outputs).
    forced = {"type": "function", "function": {"name": "Ping"}}
    agent = AsyncToolAgent(
        llm=llm,
        executor=AsyncActionExecutor([Ping()]),
        output_format=NativeToolFormat(tool_choice=forced),
        max_turn=2,
    )
    states = [chunk.stream_state async for chunk in agent.stream("ping please")]

    assert AgentStatusCode.PLUGIN_START in states and AgentStatusCode.PLUGIN_RETURN in states
    assert len(calls) == 2
    (tool,) = calls[0][1]["tools"]
    assert tool["function"]["name"] == "Ping" and calls[0][1]["tool_choice"] == forced
    assistant, result = calls[1][0][-2:]
    (call,) = assistant["tool_calls"]
    assert call["function"]["name"] == "Ping" and call["id"]
    assert result == {"role": "tool", "tool_call_id": call["id"], "content": "pong-4711"}
    # What the engine read: the chat template's tool list, the call and the tool response.
    prompt = await llm.engine.render(
        calls[1][0], chat_template=llm.chat_template, tools=calls[1][1]["tools"]
    )
    text = llm.engine.tokenizer().decode(prompt["prompt_token_ids"])
    assert "<tools>" in text and '"name": "Ping"' in text
    assert "<tool_call>" in text and "<tool_response>\npong-4711\n</tool_response>" in text
