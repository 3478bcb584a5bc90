"""Approval of tool calls in the library: the executor's hook, a tool agent's pause and resume."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agents import AgentStatusCode, AsyncToolAgent, ToolAgent
from agents.actions import ActionExecutor, AsyncActionExecutor
from agents.actions.approval import (
    PAUSE,
    ApprovalRequired,
    Decision,
    PendingApproval,
    PendingCall,
    RequireApproval,
)
from agents.actions.signature import ArgumentError
from agents.schema import AgentMessage
from agents.testing import FakeKernel, ScriptedLLM, SyncScriptedLLM


def _call(code: str) -> str:
    body = {"name": "IPythonInteractive", "parameters": {"command": code}}
    return f"Let me run it.\n```json\n{json.dumps(body)}\n```\n"


def _agent(replies: list[Any], hook: Any = None) -> tuple[AsyncToolAgent, FakeKernel, ScriptedLLM]:
    kernel = FakeKernel()
    llm = ScriptedLLM(replies)
    executor = AsyncActionExecutor(
        [kernel], approval=hook or RequireApproval(["IPythonInteractive"])
    )
    return AsyncToolAgent(llm, executor=executor), kernel, llm


def _last_user_text(llm: ScriptedLLM) -> str:
    return str(llm.calls[-1]["messages"][-1]["content"])


async def test_pause_stops_before_the_call_and_approve_runs_it() -> None:
    agent, kernel, llm = _agent([_call("print(6 * 7)"), "The answer is 42."])
    chunks = [c async for c in agent.stream("six times seven?", session_id="s")]
    reply = chunks[-1]
    assert kernel.calls == []  # nothing ran
    pending = agent.pending["s"]
    assert [c.name for c in pending.calls] == ["IPythonInteractive"]
    assert pending.calls[0].arguments == {"command": "print(6 * 7)"}
    assert reply.stream_state == AgentStatusCode.END and "```json" in reply.content
    memory = agent.state_dict("s")["memory"]
    assert [m["sender"] for m in memory] == ["user", agent.name]  # the call, stored once

    call_id = pending.calls[0].id
    final = await agent.resume({call_id: Decision.approve()}, session_id="s")
    assert kernel.calls == [("s", "print(6 * 7)")]
    assert final.content == "The answer is 42."
    assert "42" in _last_user_text(llm)  # the model read the cell's output
    assert "s" not in agent.pending


async def test_deny_gives_the_model_the_message_and_runs_nothing() -> None:
    agent, kernel, llm = _agent([_call("import os; os.remove('x')"), "Understood, I will not."])
    await agent("clean up", session_id=1)
    call_id = agent.pending[1].calls[0].id
    final = await agent.resume(
        [{"id": call_id, "action": "deny", "message": "no deleting files"}], session_id=1
    )
    assert kernel.calls == []
    assert final.content == "Understood, I will not."
    assert "denied" in _last_user_text(llm) and "no deleting files" in _last_user_text(llm)


async def test_edit_runs_the_edited_arguments_and_bad_edits_name_the_field() -> None:
    agent, kernel, llm = _agent([_call("print(1)"), "Done."])
    await agent("print something", session_id="e")
    call_id = agent.pending["e"].calls[0].id
    with pytest.raises(ArgumentError) as bad:
        agent.check_decisions({call_id: Decision.edit({"command": 5, "extra": 1})}, "e")
    assert set(bad.value.fields) == {"command", "extra"}
    with pytest.raises(ValueError, match="missing"):
        agent.check_decisions({}, "e")
    with pytest.raises(ValueError, match="no pending tool call"):
        agent.check_decisions({"call_nope": Decision.approve()}, "e")
    assert "e" in agent.pending  # refused decisions change nothing
    await agent.resume({call_id: Decision.edit({"command": "print(2 + 2)"})}, session_id="e")
    assert kernel.calls == [("e", "print(2 + 2)")]
    assert "4" in _last_user_text(llm)


async def test_resume_from_a_stored_state_on_a_fresh_agent() -> None:
    """What a service does: the memory and the pending calls are stored, the agent rebuilt."""
    agent, _, _ = _agent([_call("print('hi')")])
    await agent("greet", session_id="x")
    state, pending = agent.state_dict("x"), agent.pending["x"].to_dict()
    fresh, kernel, _ = _agent(["Said hi."])
    fresh.load_state_dict(state, session_id="x")
    final = await fresh.resume(
        {pending["tool_calls"][0]["id"]: Decision.approve()},
        session_id="x",
        pending=PendingApproval.from_dict(json.loads(json.dumps(pending))),
    )
    assert kernel.calls == [("x", "print('hi')")] and final.content == "Said hi."
    senders = [m["sender"] for m in fresh.state_dict("x")["memory"]]
    assert senders == ["user", fresh.name, "AsyncActionExecutor", fresh.name]


async def test_hook_decisions_sync_and_async_and_tools_without_approval() -> None:
    seen: list[PendingCall] = []

    async def deny_all(call: PendingCall, session_id: Any) -> Decision:
        seen.append(call)
        return Decision.deny("never")

    agent, kernel, llm = _agent([_call("print(1)"), "OK."], hook=deny_all)
    assert (await agent("go")).content == "OK."  # decided by the hook: no pause
    assert kernel.calls == [] and len(seen) == 1 and "never" in _last_user_text(llm)

    agent, kernel, _ = _agent([_call("print(3)"), "Ran."], hook=RequireApproval(["Other"]))
    assert (await agent("go")).content == "Ran." and kernel.calls == [(0, "print(3)")]
    assert agent.pending == {}


async def test_executor_called_directly() -> None:
    kernel = FakeKernel()
    executor = AsyncActionExecutor([kernel], approval=RequireApproval("all"))
    message = AgentMessage(
        sender="user", content={"name": "IPythonInteractive", "parameters": {"command": "1+1"}}
    )
    with pytest.raises(ApprovalRequired) as waiting:
        await executor(message)
    assert waiting.value.calls[0].arguments == {"command": "1+1"} and kernel.calls == []
    done = await executor.acall(message, decision=Decision.approve())
    assert done.content.format_result() == "2"

    sync = ActionExecutor(
        [FakeKernel()], approval=lambda call, sid: Decision.edit({"command": "3"})
    )
    assert sync(message).content.format_result() == "3"
    policy = RequireApproval(["Kit"])
    assert policy.needs("Kit.api") and policy.needs("Kit__api") and not policy.needs("Other")


def test_sync_tool_agent_pauses_and_resumes() -> None:
    kernel = FakeKernel()
    agent = ToolAgent(
        SyncScriptedLLM([_call("print(5)"), "Five."]),
        executor=ActionExecutor([kernel], approval=lambda call, sid: PAUSE),
    )
    agent("five?", session_id="y")
    call_id = agent.pending["y"].calls[0].id
    assert kernel.calls == []
    assert agent.resume({call_id: Decision.approve()}, session_id="y").content == "Five."
    assert kernel.calls == [("y", "print(5)")]


async def test_calls_that_cannot_run_never_wait() -> None:
    bad = '```json\n{"name": "IPythonInteractive", "parameters": {"nope": 1}}\n```\n'
    unknown = '```json\n{"name": "Nope", "parameters": {}}\n```\n'
    agent, kernel, _ = _agent([bad, unknown, "Gave up."], hook=RequireApproval("all"))
    reply = await agent("go", session_id="z")
    assert reply.content == "Gave up." and agent.pending == {} and kernel.calls == []
    errors = [str(m["content"]) for m in agent.state_dict("z")["memory"][2::2]]
    assert "unknown argument 'nope'" in errors[0] and "unknown tool 'Nope'" in errors[1]
