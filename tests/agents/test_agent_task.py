"""Task / AsyncTask: turns until an explicit termination rule fires."""

from __future__ import annotations

import pytest

from agents import AgentStatusCode, AsyncAgent
from agents.task import AsyncTask, Task
from agents.testing import ScriptedLLM, SyncScriptedLLM


async def test_task_stops_when_the_rule_fires() -> None:
    writer = AsyncAgent(ScriptedLLM(["draft 1", "draft 2", "draft 3"]), name="writer")
    critic = AsyncAgent(ScriptedLLM(["needs work", "APPROVED"]), name="critic")
    task = AsyncTask(writer, critic, done="APPROVED", max_turns=10)
    chunks = [c async for c in task.stream("write", session_id=1)]
    ends = [c for c in chunks if c.stream_state != AgentStatusCode.STREAM_ING]
    assert [(c.sender, c.content) for c in ends] == [
        ("writer", "draft 1"), ("critic", "needs work"), ("writer", "draft 2"),
        ("critic", "APPROVED"),
    ]  # fmt: skip
    assert chunks[-1].extra_info == {"stop_reason": "done"}
    assert list(task.state_dict(1)) == ["memory", "0.memory", "1.memory"]
    assert task.state_dict(1)["memory"][-1]["extra_info"] == {"stop_reason": "done"}


def test_task_stops_after_max_turns_with_a_predicate() -> None:
    task = Task(
        AsyncAgent(SyncScriptedLLM(["a", "b", "c"])),
        done=lambda m: m.content == "never",
        max_turns=3,
    )
    reply = task("go")
    assert (reply.content, reply.extra_info) == ("c", {"stop_reason": "max_turns"})
    with pytest.raises(ValueError):
        Task(AsyncAgent(), max_turns=0)
