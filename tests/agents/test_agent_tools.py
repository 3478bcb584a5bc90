"""ToolAgent / AsyncToolAgent: the model → parser → executor loop, streamed."""

from __future__ import annotations

import asyncio
from typing import Any

from agents import AgentMessage, AgentStatusCode, AsyncToolAgent, ToolAgent
from agents.actions import ActionExecutor, AsyncActionExecutor, BaseAction, tool_api
from agents.hooks import ActionProcessor
from agents.parsers import ToolParser
from agents.testing import FakeKernel, ScriptedLLM, SyncScriptedLLM

S = AgentStatusCode


def runs(chunks: list[AgentMessage]) -> list[AgentStatusCode]:
    """The chunks' states with repeats collapsed (how many text pieces doesn't matter)."""
    out: list[AgentStatusCode] = []
    for chunk in chunks:
        if not out or out[-1] != chunk.stream_state:
            out.append(AgentStatusCode(chunk.stream_state))
    return out


CODE_PARSER = ToolParser("code interpreter", begin="```python\n", end="\n```\n")


def code_agent(replies: list[Any], **kwargs: Any) -> tuple[AsyncToolAgent, ScriptedLLM]:
    llm = ScriptedLLM(replies, stop_words=["\n```\n"])
    agent = AsyncToolAgent(
        llm, "Solve it with Python.", executor=[FakeKernel()], output_format=CODE_PARSER, **kwargs
    )
    return agent, llm


async def test_streams_every_phase_and_stores_calls_and_results() -> None:
    agent, llm = code_agent(["Compute.\n```python\nx = 63\nprint(x*63.0)\n```\n", "It is 3969.0."])
    chunks = [c async for c in agent.stream("63*63.0?", session_id="s")]
    assert runs(chunks) == [S.STREAM_ING, S.CODING, S.CODE_END, S.CODE_RETURN, S.STREAM_ING, S.END]
    call, result = [c for c in chunks if c.stream_state in (S.CODE_END, S.CODE_RETURN)]
    answer = chunks[-1]
    assert call.content == "Compute.\n```python\nx = 63\nprint(x*63.0)"
    assert call.formatted["action"] == "x = 63\nprint(x*63.0)"
    assert (result.sender, result.content) == ("AsyncActionExecutor", "3969.0")
    assert result.formatted["state"] == 0 and result.formatted["args"] == {
        "command": "x = 63\nprint(x*63.0)"
    }
    assert answer.content == "It is 3969.0." and answer.formatted["status"] == 0
    memory = agent.state_dict("s")["memory"]
    assert [m["sender"] for m in memory] == ["user", "AsyncToolAgent", "AsyncActionExecutor",
                                             "AsyncToolAgent"]  # fmt: skip
    assert all(m["stream_state"] == S.END for m in memory)
    assert llm.calls[1]["messages"][-1] == {
        "role": "environment", "content": "3969.0", "name": "code interpreter"
    }  # fmt: skip


async def test_call_equals_stream_end_and_kernel_state_is_per_session() -> None:
    script = ["```python\nn = 1\n```\n", "set", "```python\nn += 1\nn\n```\n", "done"]
    agent, _ = code_agent(script * 2)
    await agent("a", session_id=1)
    await agent("b", session_id=1)
    assert [name for name, _ in agent.named_executors()] == ["executor"]
    kernel = agent.executor.actions["IPythonInteractive"]
    assert kernel.namespaces[1]["n"] == 2
    stream = [c async for c in agent.stream("a", session_id=2)]
    assert stream[-1] == AgentMessage(sender="AsyncToolAgent", content="set",
                                      formatted=stream[-1].formatted)  # fmt: skip
    assert kernel.namespaces[2]["n"] == 1


async def test_tool_errors_and_unparsable_calls_go_back_to_the_model() -> None:
    plugin = ToolParser("plugin", begin="```json\n", end="\n```\n", validate="json")
    llm = ScriptedLLM([
        "```json\n{not json\n```\n",
        '```json\n{"name": "Nope", "parameters": {}}\n```\n',
        '```json\n{"name": "Calc.add", "parameters": {"a": "x"}}\n```\n',
        '```json\n{"name": "Calc.add", "parameters": {"a": 2, "b": 3}}\n```\n',
        "5",
    ])  # fmt: skip
    agent = AsyncToolAgent(llm, executor=AsyncActionExecutor([Calc()]), output_format=plugin)
    chunks = [c async for c in agent.stream("2+3")]
    results = [c for c in chunks if c.stream_state == S.PLUGIN_RETURN]
    assert runs(chunks) == [  # lagent's order for each call, then the answer
        S.PLUGIN_START, S.PLUGIN_END, S.PLUGIN_RETURN] * 4 + [S.STREAM_ING, S.END]  # fmt: skip
    assert "Could not parse the plugin call" in results[0].content
    assert "unknown tool 'Nope'" in results[1].content and "Calc.add" in results[1].content
    assert results[2].formatted["state"] == -1001  # ARGS_ERROR
    assert results[3].content == "5"
    assert chunks[-1].content == "5"
    # The model saw each error right after its call.
    assert llm.calls[1]["messages"][-2:] == [
        {"role": "assistant", "content": "```json\n{not json\n```\n"},
        {"role": "environment", "content": results[0].content, "name": "plugin"},
    ]


class Calc(BaseAction):
    """Arithmetic."""

    @tool_api
    def add(self, a: int, b: int) -> int:
        """Add two integers.

        Args:
            a: first.
            b: second.
        """
        return a + b


class Exploding:
    def __init__(self) -> None:
        self.actions = {"Boom": None}

    async def acall(self, message: AgentMessage, session_id: Any = 0) -> AgentMessage:
        raise RuntimeError("executor bug")


async def test_max_turn_and_broken_executors_never_raise() -> None:
    agent, llm = code_agent(["```python\n1\n```\n"] * 2, max_turn=2)
    chunks = [c async for c in agent.stream("loop forever")]
    assert len(llm.calls) == 2
    assert chunks[-1].stream_state == S.END and chunks[-1].formatted["status"] == 1
    broken = AsyncToolAgent(ScriptedLLM(["```python\n1\n```\n", "ok"]), executor=Exploding(),
                            output_format=CODE_PARSER)  # fmt: skip
    out = [c async for c in broken.stream("x")]
    assert runs(out) == [S.CODING, S.CODE_END, S.CODE_RETURN, S.STREAM_ING, S.END]
    assert out[-3].content == "RuntimeError: executor bug"  # CODE_RETURN
    assert out[-1].content == "ok"
    none = AsyncToolAgent(ScriptedLLM(["```python\n1\n```\n", "fine"]), output_format=CODE_PARSER)
    assert (await none("x")).content == "fine"
    assert "No tools" in none.state_dict()["memory"][2]["content"]


def test_sync_tool_agent_with_sync_executor() -> None:
    agent = ToolAgent(
        SyncScriptedLLM(["```python\nprint('hi')\n```\n", "said hi"], stop_words=["\n```\n"]),
        executor=ActionExecutor([FakeKernel()]),
        output_format=CODE_PARSER,
    )
    chunks = list(agent.stream("greet"))
    assert runs(chunks) == [S.STREAM_ING, S.CODING, S.CODE_END, S.CODE_RETURN, S.STREAM_ING, S.END]
    assert [c.content for c in chunks if c.stream_state == S.CODE_RETURN] == ["hi"]
    agent.llm = SyncScriptedLLM(["```python\nprint('hi')\n```\n", "said hi"])
    assert agent("greet", session_id=9) == chunks[-1]


async def test_concurrent_tool_sessions_are_isolated() -> None:
    kernel = FakeKernel()
    llm = ScriptedLLM(["```python\nprint(me)\n```\n", "done"], cycle=True)
    agent = AsyncToolAgent(llm, executor=[kernel], output_format=CODE_PARSER)
    for i in range(4):
        kernel.namespaces[f"s{i}"] = {"me": f"session {i}"}
    await asyncio.gather(*[agent(f"who am I {i}", session_id=f"s{i}") for i in range(4)])
    for i in range(4):
        memory = agent.state_dict(f"s{i}")["memory"]
        assert memory[2]["content"] == f"session {i}"
        assert memory[0]["content"] == f"who am I {i}"


async def test_action_processor_hook_turns_parser_output_into_calls() -> None:
    executor = AsyncActionExecutor([Calc()], hooks=[ActionProcessor()])
    plugin = ToolParser("plugin", begin="<c>", end="</c>", validate="json")

    async def run(text: str) -> Any:
        reply = AgentMessage(sender="bot", content=text, formatted=plugin.parse_response(text))
        return (await executor(reply, session_id=1)).content

    assert await run('<c>{"name": "Calc.add", "arguments": {"a": 1, "b": 2}}</c>') == "3"
    assert "could not parse the tool call" in await run("<c>{oops</c>")
    call = {"name": "Calc.add", "parameters": {"a": 2, "b": 2}}
    direct = AgentMessage(sender="bot", content="", formatted=call)
    assert (await executor(direct)).content == "4"
