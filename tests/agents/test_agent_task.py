"""Task's lagent-style front: ``Task(a, b, done=...)`` streams every reply, ends on the rule."""

from __future__ import annotations

import pytest

from agents import AgentStatusCode, AsyncAgent
from agents.task import Task
from agents.testing import ScriptedLLM, SyncScriptedLLM


async def test_task_stops_when_the_rule_fires() -> None:
    writer = AsyncAgent(ScriptedLLM(["draft 1", "draft 2", "draft 3"]), name="writer")
    critic = AsyncAgent(ScriptedLLM(["needs work", "APPROVED"]), name="critic")
    task = Task(writer, critic, done="APPROVED", max_turns=10)
    chunks = [c async for c in task.stream("write", session_id=1)]
    ends = [c for c in chunks if c.stream_state != AgentStatusCode.STREAM_ING]
    assert [(c.sender, c.receiver, c.content) for c in ends] == [
        ("writer", "critic", "draft 1"), ("critic", "writer", "needs work"),
        ("writer", "critic", "draft 2"), ("critic", "user", "APPROVED"),
    ]  # fmt: skip
    assert chunks[-1].extra_info["status"] == "DONE"
    assert chunks[-1].extra_info["turns"] == 4
    assert list(task.state_dict(1)) == ["agent.memory", "critic.agent.memory"]
    critic_saw = [m["content"] for m in task.state_dict(1)["critic.agent.memory"]]
    assert critic_saw == ["draft 1", "needs work", "draft 2", "APPROVED"]


def test_task_stops_after_max_turns_with_a_predicate() -> None:
    task = Task(
        AsyncAgent(SyncScriptedLLM(["a", "b", "c"]), name="a"),
        AsyncAgent(SyncScriptedLLM(["x", "y", "z"]), name="b"),
        done=lambda m: m.content == "never",
        max_turns=3,
    )
    result = task.run("go")
    assert (result.content, result.status.value, result.turns) == ("b", "MAX_TURNS", 3)
    with pytest.raises(ValueError):
        Task(AsyncAgent(), max_turns=0)
