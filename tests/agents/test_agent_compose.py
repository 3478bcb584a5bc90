"""Sequential / AsyncSequential pipelines and AgentList / AgentDict containers."""

from __future__ import annotations

import pytest

from agents import Agent, AgentStatusCode, AsyncAgent
from agents.compose import AgentDict, AgentList, AsyncSequential, Sequential
from agents.testing import ScriptedLLM, SyncScriptedLLM


def test_sequential_passes_each_reply_on_and_keeps_dotted_state() -> None:
    first_llm = SyncScriptedLLM(["draft", "draft 2"])
    pipe = Sequential(
        Agent(first_llm, "Write.", name="writer"),
        Agent(SyncScriptedLLM(["edited"]), "Edit.", name="editor"),
    )
    reply = pipe("topic")
    assert reply.content == "edited" and reply.sender == "editor"
    assert list(pipe.state_dict()) == ["memory", "0.memory", "1.memory"]
    assert [m["content"] for m in pipe.state_dict()["1.memory"]] == ["draft", "edited"]
    assert pipe[-1].name == "editor" and len(pipe) == 2
    # exit_at cycles through the stages and stops after the given step.
    assert pipe("again", session_id=2, exit_at=0).content == "draft 2"
    with pytest.raises(ValueError):
        Sequential()


async def test_async_sequential_streams_every_stage() -> None:
    pipe = AsyncSequential(
        {"a": AsyncAgent(ScriptedLLM(["one"]), name="a"), "b": AsyncAgent(ScriptedLLM(["two"]))}
    )
    chunks = [c async for c in pipe.stream("go")]
    assert [(c.content, c.stream_state) for c in chunks] == [
        ("one", AgentStatusCode.STREAM_ING),
        ("one", AgentStatusCode.END),
        ("two", AgentStatusCode.STREAM_ING),
        ("two", AgentStatusCode.END),
    ]
    assert list(pipe.state_dict()) == ["memory", "a.memory", "b.memory"]


async def test_containers_register_members_by_index_and_name() -> None:
    class Team(AsyncAgent):
        def __init__(self) -> None:
            super().__init__()
            self.workers = AgentList([AsyncAgent(ScriptedLLM(["w0"])), AsyncAgent()])
            self.roles = AgentDict({"critic": AsyncAgent(ScriptedLLM(["c"]))})

    team = Team()
    assert list(team.state_dict()) == [
        "memory", "workers.0.memory", "workers.1.memory", "roles.critic.memory"
    ]  # fmt: skip
    await team.workers[0]("hi", session_id=1)
    state = team.state_dict(1)
    assert [m["content"] for m in state["workers.0.memory"]] == ["hi", "w0"]
    other = Team()
    other.load_state_dict(state, session_id=1)
    assert other.state_dict(1) == state
    other.reset(1, keypath="workers.0")
    assert other.state_dict(1)["workers.0.memory"] == []
    team.workers.append(AsyncAgent())
    team.roles["writer"] = AsyncAgent()
    del team.workers[0]
    assert list(team.state_dict()) == [
        "memory", "workers.0.memory", "workers.1.memory", "roles.critic.memory",
        "roles.writer.memory",
    ]  # fmt: skip
    with pytest.raises(TypeError):
        AgentList([object()])  # type: ignore[list-item]
    with pytest.raises(KeyError):
        AgentDict({"a.b": AsyncAgent()})
