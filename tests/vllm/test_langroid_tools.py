"""langroid tools on the real engine: the enabled tools' instructions reach the model through its
chat template (prompt-based: the system message's TOOL / JSON FORMAT sections; native: the
``tools`` list, ``use=False`` tools left out), and a forced native call runs the tool's handler."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents import AsyncToolAgent, ToolMessage
from agents.native import NativeToolFormat
from agents.schema import AgentStatusCode
from app.engines.vllm import VllmHandle

pytestmark = pytest.mark.vllm


class SquareTool(ToolMessage):
    request: str = "square"
    purpose: str = "To find the square of <number>"
    number: int

    def handle(self) -> str:
        return f"square-result-{self.number**2}"


class SecretTool(ToolMessage):
    request: str = "secret"
    purpose: str = "Never shown to the model"
    code: str

    def handle(self) -> str:
        return "hidden"


def recorded(llm: Any, monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    calls: list[tuple[Any, dict[str, Any]]] = []
    astream = llm.astream

    def recording(messages: list[dict[str, Any]], **kwargs: Any) -> AsyncIterator[Any]:
        calls.append((messages, kwargs))
        stream: AsyncIterator[Any] = astream(messages, **kwargs)
        return stream

    monkeypatch.setattr(llm, "astream", recording)
    return calls


async def rendered(llm: Any, messages: Any, tools: Any = None) -> str:
    prompt = await llm.engine.render(messages, chat_template=llm.chat_template, tools=tools)
    return str(llm.engine.tokenizer().decode(prompt["prompt_token_ids"]))


async def test_prompt_based_tools_are_described_in_the_system_message(
    vllm_handle: VllmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = vllm_handle.llm
    calls = recorded(llm, monkeypatch)
    agent = AsyncToolAgent(llm, "You are a calculator.", max_turn=1)
    agent.enable_message(SquareTool)
    agent.enable_message(SecretTool, use=False)
    await agent("What is the square of 12?", max_new_tokens=4)
    text = await rendered(llm, calls[0][0])
    system = text[: text.index("What is the square of 12?")]
    assert system.index("You are a calculator.") < system.index("TOOL: square")
    assert "=== ALL AVAILABLE TOOLS and THEIR FORMAT INSTRUCTIONS ===" in system
    assert '"number": {' in system and '"request": {' in system
    assert "secret" not in system  # known and handled, not usable: never described


async def test_a_forced_native_langroid_tool_runs_its_handler(
    vllm_handle: VllmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    llm = vllm_handle.llm
    calls = recorded(llm, monkeypatch)
    agent = AsyncToolAgent(llm, "Be exact.", output_format=NativeToolFormat(), max_turn=2)
    agent.enable_message(SquareTool, force=True)  # the random model needs to be forced
    agent.enable_message(SecretTool, use=False)
    states = [c.stream_state async for c in agent.stream("square a number", max_new_tokens=24)]
    assert states.index(AgentStatusCode.PLUGIN_START) < states.index(AgentStatusCode.PLUGIN_END)
    assert states.index(AgentStatusCode.PLUGIN_END) < states.index(AgentStatusCode.PLUGIN_RETURN)
    assert states[-1] == AgentStatusCode.END
    (tool,) = calls[0][1]["tools"]
    assert tool["function"]["name"] == "square"
    assert tool["function"]["parameters"]["properties"] == {"number": {"type": "integer"}}
    text = await rendered(llm, calls[1][0], calls[1][1]["tools"])
    assert '"name": "square"' in text and "secret" not in text
    assert "square-result-" in text  # the handler's result reached the model
