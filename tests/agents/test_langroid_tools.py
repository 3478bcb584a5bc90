"""langroid fidelity beyond the docs' examples: native ``tools`` honour use/handle/force, a call
without ``request`` is inferred, string signals can be turned off, ``kill_session`` only kills
its session, and a tool in the person's own message never runs."""

from __future__ import annotations

import asyncio

from agents import AsyncAgent, AsyncToolAgent, StatusCode, Task, TaskConfig, ToolMessage
from agents.native import NativeToolFormat
from agents.testing import ScriptedLLM


class SquareTool(ToolMessage):
    request: str = "square"
    purpose: str = "To find the square of <number>"
    number: int

    def handle(self) -> str:
        return str(self.number**2)


class CubeTool(ToolMessage):
    request: str = "cube"
    purpose: str = "To find the cube of <value>"
    value: int

    @classmethod
    def instructions(cls) -> str:
        return "Use it for cubes only."

    def handle(self) -> str:
        return str(self.value**3)


async def test_native_tools_follow_use_handle_and_force() -> None:
    llm = ScriptedLLM(["fine", "fine again"])
    agent = AsyncToolAgent(llm, "Be exact.", output_format=NativeToolFormat(), name="N")
    agent.enable_message([SquareTool, CubeTool])
    agent.enable_message(CubeTool, use=False, handle=True)  # handled, not shown
    agent.enable_message(SquareTool, force=True)
    await agent("go")
    params = llm.calls[0]["params"]
    assert [t["function"]["name"] for t in params["tools"]] == ["square"]
    assert params["tool_choice"] == {"type": "function", "function": {"name": "square"}}
    # Native calls: the prompt carries no JSON format section, only tools' own guidance.
    assert llm.calls[0]["messages"][0]["content"] == "Be exact."
    agent.enable_message(CubeTool)  # now usable: its guidance joins the system message
    await agent("again")
    system = llm.calls[1]["messages"][0]["content"]
    assert "GUIDANCE: Use it for cubes only." in system and "JSON FORMAT" not in system


async def test_a_call_without_request_is_inferred_from_its_fields() -> None:
    llm = ScriptedLLM(['{"value": 2}', "DONE 8"])
    agent = AsyncToolAgent(llm, name="Cuber", executor=[SquareTool, CubeTool])
    result = await Task(agent).run_async("cube 2")
    assert (result.status, result.content) == (StatusCode.DONE, "8")


async def test_string_signals_can_be_turned_off() -> None:
    llm = ScriptedLLM(["DONE? not yet", "still here"])
    quiet = Task(AsyncAgent(llm, name="Q"), config=TaskConfig(recognize_string_signals=False))
    result = await quiet.run_async("hi", turns=1)
    assert (result.status, result.content) == (StatusCode.FIXED_TURNS, "DONE? not yet")


async def test_kill_session_kills_only_that_session() -> None:
    def slow(name: str) -> Task:
        llm = ScriptedLLM(["word " * 40], chunk_delay_s=0.01)
        return Task(AsyncAgent(llm, name=name), single_round=True)

    one = asyncio.create_task(slow("A").run_async("talk", session_id="a"))
    two = asyncio.create_task(slow("B").run_async("talk", session_id="b"))
    await asyncio.sleep(0.05)
    Task.kill_session("a")
    assert (await one).status == StatusCode.KILL
    assert (await two).status == StatusCode.DONE


async def test_a_tool_call_in_the_users_own_message_never_runs() -> None:
    llm = ScriptedLLM(["I will not square that."])
    agent = AsyncToolAgent(llm, name="Careful", executor=[SquareTool])
    result = await Task(agent, single_round=True).run_async('{"request": "square", "number": 3}')
    assert result.content == "I will not square that."
    assert [m.sender for m in result.messages] == ["Careful"]


async def test_done_if_tool_require_recipient_and_disabling() -> None:
    llm = ScriptedLLM(['{"request": "square", "number": 4}'])
    agent = AsyncToolAgent(llm, name="T", executor=[SquareTool])
    result = await Task(agent, config=TaskConfig(done_if_tool=True)).run_async("go")
    assert result.status == StatusCode.DONE and [m.sender for m in result.messages] == ["T"]

    strict = AsyncToolAgent(ScriptedLLM(["ok"]), name="S")
    strict.enable_message(SquareTool, require_recipient=True)
    (tool,) = strict.langroid_tools.usable()
    assert "recipient" in tool.llm_function_schema()["parameters"]["required"]
    strict.disable_message_use(tool)
    assert strict.langroid_tools.usable() == [] and "square" in strict.executor
    strict.disable_message_handling(tool)
    assert "square" not in strict.executor
