"""Native tool calls: OpenAI ``tools`` in, calls from the backend, results as ``tool`` turns."""

from __future__ import annotations

from typing import Any

from agents.actions import AsyncActionExecutor
from agents.actions.builtins import Calculator
from agents.llms import AsyncGPTAPI
from agents.llms.templates import to_api_messages
from agents.native import NativeToolFormat, merge_tool_calls
from agents.schema import AgentStatusCode
from agents.testing import ScriptedLLM
from agents.tool_agent import AsyncToolAgent, ToolAgent
from tests.agents.test_llms_openai import MockOpenAI, server  # noqa: F401 (the fixture)

CALL = {"id": "call_1", "name": "Calculator", "arguments": {"expression": "6*7"}}


def native_agent(
    replies: list[Any], cls: type = AsyncToolAgent, **fmt: Any
) -> tuple[Any, ScriptedLLM]:
    llm = ScriptedLLM(replies)
    agent = cls(
        llm=llm,
        executor=AsyncActionExecutor([Calculator()]),
        output_format=NativeToolFormat(**fmt),
    )
    return agent, llm


async def test_a_native_call_runs_the_tool_and_its_result_goes_back_as_a_tool_message() -> None:
    agent, llm = native_agent([{"content": "Let me compute.", "tool_calls": [CALL]}, "It is 42."])
    states = [chunk.stream_state async for chunk in agent.stream("What is 6*7?")]
    assert AgentStatusCode.PLUGIN_START in states and AgentStatusCode.PLUGIN_RETURN in states
    first, second = llm.calls
    (tool,) = first["params"]["tools"]
    assert tool["type"] == "function" and tool["function"]["name"] == "Calculator"
    assert "expression" in tool["function"]["parameters"]["properties"]
    assert not any("Calculator" in str(m["content"]) for m in first["messages"])  # no prompt
    assistant, result = second["messages"][-2:]
    assert assistant["role"] == "assistant" and assistant["content"] == "Let me compute."
    (call,) = assistant["tool_calls"]
    assert call == {
        "id": "call_1",
        "type": "function",
        "function": {"name": "Calculator", "arguments": '{"expression": "6*7"}'},
    }
    assert result == {"role": "tool", "tool_call_id": "call_1", "content": "42"}
    assert agent.memory is not None
    assert agent.memory.get(0).get_memory()[-1].content == "It is 42."


def test_the_sync_agent_and_tool_choice_go_the_same_way() -> None:
    agent, llm = native_agent([{"tool_calls": [CALL]}, "42"], cls=ToolAgent, tool_choice="required")
    assert agent("6*7?").content == "42"
    assert all(call["params"]["tool_choice"] == "required" for call in llm.calls)
    assert llm.calls[1]["messages"][-1]["content"] == "42"


async def test_a_per_call_tool_choice_overrides_the_formats() -> None:
    agent, llm = native_agent(["no tools today"], tool_choice="required")
    reply = await agent("hi", tool_choice="none")
    assert reply.content == "no tools today"
    assert llm.calls[0]["params"]["tool_choice"] == "none"


async def test_arguments_that_are_not_a_json_object_are_shown_to_the_model() -> None:
    bad = {"id": "call_9", "name": "Calculator", "arguments": "{not json"}
    agent, llm = native_agent([{"tool_calls": [bad]}, "sorry"])
    assert (await agent("6*7?")).content == "sorry"
    result = llm.calls[1]["messages"][-1]
    assert result["role"] == "tool" and result["tool_call_id"] == "call_9"
    assert "{not json" in result["content"] and "JSON object" in result["content"]


def test_stream_deltas_merge_by_index_and_whole_entries_stay_apart() -> None:
    deltas = [
        {"index": 0, "id": "a", "type": "function", "function": {"name": "f", "arguments": ""}},
        {"index": 0, "function": {"arguments": '{"x": '}},
        {"index": 0, "function": {"arguments": "1}"}},
    ]
    assert merge_tool_calls(deltas) == [{"id": "a", "name": "f", "arguments": '{"x": 1}'}]
    whole = {"id": "b", "type": "function", "function": {"name": "g", "arguments": "{}"}}
    merged = merge_tool_calls([whole, {"name": "h", "arguments": {"y": 2}}])
    assert [c["name"] for c in merged] == ["g", "h"] and merged[1]["id"].startswith("call_")
    assert merged[1]["arguments"] == '{"y": 2}'


def test_api_messages_keep_tool_calls_and_tool_call_ids() -> None:
    calls = [{"id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    msgs: list[dict[str, Any]] = [
        {"role": "assistant", "content": "", "tool_calls": calls},
        {"role": "tool", "tool_call_id": "c", "content": "ok"},
    ]
    assert to_api_messages(msgs) == msgs


async def test_an_openai_server_s_streamed_call_runs_and_goes_back_as_openai_messages(
    server: MockOpenAI,  # noqa: F811 (the imported fixture)
) -> None:
    fn = {"name": "Calculator", "arguments": '{"expression": '}
    first = {"index": 0, "id": "c7", "type": "function", "function": fn}
    rest = {"index": 0, "function": {"arguments": '"6*7"}'}}
    server.plan = [{"words": [], "tool_calls": [first, rest]}, {"words": ["It is 42."]}]
    async with AsyncGPTAPI("m", base_url=server.url) as llm:
        agent = AsyncToolAgent(
            llm=llm, executor=[Calculator()], output_format=NativeToolFormat("auto")
        )
        assert (await agent("6*7?")).content == "It is 42."
    body = server.requests[1]["body"]
    assert body["tools"][0]["function"]["name"] == "Calculator" and body["tool_choice"] == "auto"
    assistant, result = body["messages"][-2:]
    assert assistant["tool_calls"][0]["function"]["arguments"] == '{"expression": "6*7"}'
    assert result == {"role": "tool", "tool_call_id": "c7", "content": "42"}
