"""What an agent copies of a message, and what it registers as its parts."""

from __future__ import annotations

from typing import Any

from agents import AgentMessage, AsyncAgent
from agents.actions import ActionExecutor
from agents.testing import ScriptedLLM


async def _stored_input(message: AgentMessage) -> AgentMessage:
    agent = AsyncAgent(ScriptedLLM(["ok"]))
    await agent(message, session_id="s")
    return agent.memory.get_memory("s")[0]  # type: ignore[union-attr]


async def test_a_list_met_twice_in_a_message_stays_one_list_in_the_copy() -> None:
    shared = [1]
    message = AgentMessage(sender="user", content="hi", extra_info={"a": shared, "b": shared})
    stored = await _stored_input(message)
    stored.extra_info["a"].append(2)
    assert stored.extra_info["b"] == [1, 2]  # as copy.deepcopy keeps it
    assert shared == [1]


async def test_other_values_in_a_message_are_copied_deeply_too() -> None:
    class Box:
        def __init__(self) -> None:
            self.items: list[int] = [1]

    box = Box()
    message = AgentMessage(
        sender="user",
        content=[{"type": "text", "text": "hi", "n": 1.5, "ok": True, "none": None}],
        extra_info={"box": box, "pair": ([1], "x")},
    )
    stored = await _stored_input(message)
    assert stored.content == message.content and stored.content is not message.content
    assert stored.content[0] is not message.content[0]
    assert stored.extra_info["box"] is not box and stored.extra_info["box"].items == [1]
    assert stored.extra_info["pair"] == ([1], "x")
    assert stored.extra_info["pair"][0] is not message.extra_info["pair"][0]


def test_a_part_replaced_by_a_plain_value_is_no_longer_registered() -> None:
    agent = AsyncAgent(ScriptedLLM(["ok"]))
    agent.helper = AsyncAgent(ScriptedLLM(["ok"]))
    agent.tools = ActionExecutor([])
    assert [name for name, _ in agent.named_llms()] == ["llm", "helper.llm"]
    assert [name for name, _ in agent.named_executors()] == ["tools"]
    agent.llm = None
    agent.helper = "gone"
    agent.tools = {"plain": "dict"}
    assert list(agent.named_llms()) == [] and list(agent.named_executors()) == []
    assert list(agent.named_agents()) == []


def test_a_private_attribute_is_never_registered() -> None:
    agent: Any = AsyncAgent(ScriptedLLM(["ok"]))
    agent._inner = AsyncAgent()
    assert list(agent.named_agents()) == []
