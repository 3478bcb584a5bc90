"""Tasks (responders, termination rules), tool messages and named agents, beyond the docs."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from agents import (
    AgentDirectory,
    AgentMessage,
    AgentStatusCode,
    AsyncAgent,
    AsyncToolAgent,
    Budget,
    ConversableAgent,
    Entity,
    StatusCode,
    Task,
    ToolMessage,
    run_batch_async,
)
from agents.llms.base import usage_scope
from agents.testing import ScriptedLLM


def call(name: str, **arguments: Any) -> str:
    return "```json\n" + json.dumps({"name": name, "parameters": arguments}) + "\n```\n"


class Lookup(ToolMessage):
    request: str = "lookup"
    purpose: str = "To look up the capital of <country>"
    country: str
    handle_in_thread = False

    async def handle_async(self) -> str:
        await asyncio.sleep(0)
        return {"France": "Paris"}.get(self.country, "unknown")


async def test_stream_shows_every_participant_with_sender_and_receiver() -> None:
    lead = Task(AsyncAgent(ScriptedLLM(["Question one", "Thanks"]), name="Lead"), done="Thanks")
    helper = AsyncAgent(ScriptedLLM(["An answer"]), name="Helper")
    lead.add_sub_task(Task(helper, single_round=True))
    chunks = [c async for c in lead.stream("go")]
    streamed = {c.sender for c in chunks if c.stream_state == AgentStatusCode.STREAM_ING}
    assert streamed == {"Lead", "Helper"}  # the sub-task's model streams through the parent
    ends = [(c.sender, c.receiver, c.content) for c in chunks if c.stream_state == 0]
    assert ends == [
        ("Lead", "Helper", "Question one"), ("Helper", "Lead", "An answer"),
        ("Lead", "user", "Thanks"),
    ]  # fmt: skip


def test_done_if_response_and_done_if_no_response() -> None:
    one = Task(AsyncAgent(ScriptedLLM(["hello"]), name="A"), done_if_response=[Entity.LLM])
    result = one.run("hi")
    assert (result.status, result.content, result.turns) == (StatusCode.DONE, "hello", 1)
    quiet = Task(AsyncAgent(ScriptedLLM([""]), name="Q"), done_if_no_response=[Entity.LLM])
    result = quiet.run("say nothing")
    assert (result.status, result.content, result.turns) == (StatusCode.DONE, "say nothing", 1)


def test_a_human_responder_answers_and_can_quit() -> None:
    answers = iter(["tell me more", "q"])
    seen: list[str] = []

    def human(message: AgentMessage | None) -> str:
        seen.append(str(message.content if message else ""))
        return next(answers)

    task = Task(AsyncAgent(ScriptedLLM(["first", "second"]), name="Bot"), user=human)
    result = task.run("hi")
    assert result.status == StatusCode.USER_QUIT
    assert seen == ["first", "second"]
    assert [(m.sender, m.content) for m in result.messages[:3]] == [
        ("Bot", "first"), ("user", "tell me more"), ("Bot", "second"),
    ]  # fmt: skip


def test_a_message_addressed_by_name_goes_only_to_that_responder() -> None:
    lead = Task(AsyncAgent(ScriptedLLM([]), name="Lead"), single_round=True)
    lead.add_sub_task(Task(AsyncAgent(ScriptedLLM(["from a"]), name="A"), single_round=True))
    lead.add_sub_task(Task(AsyncAgent(ScriptedLLM(["from b"]), name="B"), single_round=True))
    result = lead.run(AgentMessage(sender="user", receiver="B", content="only B, please"))
    assert (result.content, result.messages[-1].sender) == ("from b", "B")


def test_a_cost_budget_counts_sub_task_usage() -> None:
    price = Budget(max_cost=0.01, prompt_cost_per_1k=1.0, completion_cost_per_1k=1.0)
    lead = Task(AsyncAgent(ScriptedLLM(["ask", "ask again"]), name="Lead"), budget=price)
    lead.add_sub_task(Task(AsyncAgent(ScriptedLLM(["w " * 20]), name="Talker"), single_round=True))
    with usage_scope() as outer:
        result = lead.run("go")
    assert result.status == StatusCode.BUDGET
    assert result.cost > 0.01 and result.usage.total_tokens == outer.total_tokens > 20


async def test_kill_stops_a_running_sub_task() -> None:
    lead = Task(AsyncAgent(ScriptedLLM(["over to you"]), name="Lead"))
    slow = AsyncAgent(ScriptedLLM(["word " * 200], chunk_delay_s=0.005), name="Slow")
    lead.add_sub_task(Task(slow, single_round=True))
    seen = asyncio.Event()

    async def watch() -> list[AgentMessage]:
        out = []
        async for chunk in lead.stream("go"):
            out.append(chunk)
            if chunk.sender == "Slow":
                seen.set()
        return out

    run = asyncio.create_task(watch())
    await seen.wait()
    lead.kill()
    chunks = await asyncio.wait_for(run, 1)
    assert chunks[-1].extra_info["status"] == "KILL"
    assert len(slow.llm.calls) == 1  # type: ignore[union-attr]


async def test_tool_message_validation_async_handler_and_enable_message() -> None:
    agent = AsyncToolAgent(
        ScriptedLLM([
            call("lookup", country="France", extra=1),
            '```json\n{"request": "lookup", "country": "France"}\n```\n',
            "Paris it is.",
        ]),
        name="Geo",
    )  # fmt: skip
    agent.enable_message(Lookup)
    result = await Task(agent, done_if_response=[Entity.LLM]).run_async("capital of France?")
    contents = [m.content for m in result.messages]
    assert contents[1] == "invalid arguments for lookup: unknown argument 'extra'"
    assert result.messages[1].formatted["state"] == -1001  # ARGS_ERROR, like any tool's
    assert contents[3] == "Paris" and result.content == "Paris it is."
    assert agent.llm.calls[1]["messages"][-1]["content"].startswith("invalid arguments")  # type: ignore[union-attr]


def test_tool_message_examples_and_schema() -> None:
    action = Lookup.as_action()
    assert action.name == "lookup"
    assert action.tool_schemas()[0]["function"]["parameters"]["required"] == ["country"]
    with pytest.raises(TypeError):

        class NoName(ToolMessage):
            x: int

        NoName.as_action()


async def test_run_batch_isolates_inputs_and_resets_their_sessions() -> None:
    echo = AsyncAgent(ScriptedLLM(None), name="Echo")  # echoes the last user message
    results = await run_batch_async(Task(echo, single_round=True), ["a", "b", "c"], concurrency=3)
    assert [r.content for r in results] == ["a", "b", "c"]
    assert echo.memory is not None and echo.memory.sessions() == []


async def test_auto_replies_stop_after_the_limit() -> None:
    directory = AgentDirectory()
    ping = ConversableAgent(
        "ping", llm=ScriptedLLM(["ping"], cycle=True), directory=directory,
        max_consecutive_auto_reply=2,
    )  # fmt: skip
    ConversableAgent("pong", llm=ScriptedLLM(["pong"], cycle=True), directory=directory,
                     max_consecutive_auto_reply=2)  # fmt: skip
    await ping.initiate_chat("pong", "start")
    assert [m.content for m in directory.transcript] == ["start", "pong", "ping", "pong", "ping"]
    assert len(ping.chat_messages["pong"]) == 5
    with pytest.raises(KeyError, match="no agent named 'nobody'"):
        await ping.send("hello?", "nobody")


def test_a_single_round_tool_agent_answers_after_its_tool_exchange() -> None:
    geo = AsyncToolAgent(ScriptedLLM([call("lookup", country="France"), "Paris."]), name="Geo")
    geo.enable_message(Lookup)
    result = Task(geo, single_round=True).run("capital of France?")
    assert (result.status, result.content, result.turns) == (StatusCode.DONE, "Paris.", 3)


def test_round_robin_sub_tasks_and_a_fallback_when_one_is_silent() -> None:
    writer = AsyncAgent(ScriptedLLM(["draft", "draft 2", "final"]), name="writer")
    subs = [
        Task(AsyncAgent(ScriptedLLM(["too long"]), name="editor"), single_round=True),
        Task(AsyncAgent(ScriptedLLM(["typo"]), name="proofreader"), single_round=True),
    ]
    task = Task(writer, sub_tasks=subs, round_robin=True, max_turns=5)
    said = [(m.sender, m.content) for m in task.run("write").messages]
    assert said == [
        ("writer", "draft"), ("editor", "too long"), ("writer", "draft 2"),
        ("proofreader", "typo"), ("writer", "final"),
    ]  # fmt: skip
    silent = AsyncAgent(ScriptedLLM([""]), name="quiet")
    quiet = Task(silent, single_round=True, max_stalled_steps=1)  # says nothing: STALLED
    helpful = Task(AsyncAgent(ScriptedLLM(["here"]), name="helpful"), single_round=True)
    lead = Task(AsyncAgent(ScriptedLLM(["help?"]), name="lead"), sub_tasks=[quiet, helpful])
    result = lead.run("go", turns=2)
    assert [(m.sender, m.content) for m in result.messages] == [
        ("lead", "help?"), ("helpful", "here"),
    ]  # fmt: skip


async def test_an_agent_as_a_tool_answers_in_the_callers_session() -> None:
    from agents.agent_tool import AgentTool

    critic = AsyncAgent(ScriptedLLM(["Looks right.", "Still right."]), name="critic")
    writer = AsyncToolAgent(
        ScriptedLLM(
            [call("critic", message="2+2=4?"), "Checked.", call("critic", message="3?"), "Ok."]
        ),
        executor=[AgentTool(critic)],
        name="writer",
    )
    assert (await writer("check", session_id="s1")).content == "Checked."
    assert (await writer("again", session_id="s2")).content == "Ok."
    assert [m.content for m in critic.memory.get_memory("s1")] == ["2+2=4?", "Looks right."]  # type: ignore[union-attr]
    assert [m.content for m in critic.memory.get_memory("s2")] == ["3?", "Still right."]  # type: ignore[union-attr]
