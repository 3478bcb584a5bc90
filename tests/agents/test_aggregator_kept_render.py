"""DefaultAggregator's kept render of a session's history (agents/aggregator.py ``_KEPT``): a
model call renders only the messages after those it rendered before, and never a stale one."""

from __future__ import annotations

from typing import Any

import pytest

from agents import aggregator
from agents.aggregator import DefaultAggregator
from agents.memory import Memory
from agents.schema import ActionReturn, AgentMessage


def memory_of(*messages: AgentMessage) -> Memory:
    memory = Memory()
    memory.memory = list(messages)
    return memory


def fresh(memory: Memory, system: str | None = None) -> list[dict[str, Any]]:
    """The render with nothing kept."""
    aggregator._KEPT.clear()
    aggregator._KEPT_MESSAGES[0] = 0
    return DefaultAggregator().aggregate(memory, "a", None, system)


def history(n: int) -> list[AgentMessage]:
    return [AgentMessage(sender=("user", "a")[i % 2], content=f"m{i}") for i in range(n)]


@pytest.fixture
def rendered_counts(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many messages each render went through itself (not taken from a kept render)."""
    counts: list[int] = []
    real = DefaultAggregator._render_from

    def counting(out: Any, messages: Any, done: int, *args: Any) -> bool:
        counts.append(len(messages) - done)
        return real(out, messages, done, *args)

    monkeypatch.setattr(DefaultAggregator, "_render_from", staticmethod(counting))
    aggregator._KEPT.clear()
    aggregator._KEPT_MESSAGES[0] = 0
    return counts


def test_a_later_call_renders_only_the_new_messages(rendered_counts: list[int]) -> None:
    messages = history(100)
    agg = DefaultAggregator()
    question = AgentMessage(content="q1")
    first = agg.aggregate(memory_of(*messages, question), "a", None, "sys")
    messages += [question, AgentMessage(sender="a", content="r1")]
    memory = memory_of(*messages, AgentMessage(content="q2"))
    second = agg.aggregate(memory, "a", None, "sys")
    assert rendered_counts[0] == 101
    assert rendered_counts[1] == 2  # the 101 first messages came from the kept render
    assert first[:-1] == second[: len(first) - 1]
    assert second == fresh(memory, "sys")


def test_the_prompt_handed_out_is_a_copy() -> None:
    memory = memory_of(*history(10), AgentMessage(content="q"))
    agg = DefaultAggregator()
    first = agg.aggregate(memory, "a", None, None)
    for message in first:
        message["content"] = "changed by the caller"
    assert agg.aggregate(memory, "a", None, None) == fresh(memory)
    assert all(m["content"] != "changed by the caller" for m in fresh(memory))


@pytest.mark.parametrize("field", ["content", "sender"])
def test_a_message_assigned_anew_is_rendered_anew(field: str) -> None:
    messages = history(20)
    agg = DefaultAggregator()
    agg.aggregate(memory_of(*messages), "a", None, "sys")
    setattr(messages[3], field, "user" if field == "sender" else "edited")
    got = agg.aggregate(memory_of(*messages, AgentMessage(content="q")), "a", None, "sys")
    assert got == fresh(memory_of(*messages, AgentMessage(content="q")), "sys")
    if field == "content":
        assert got[4] == {"role": "assistant", "content": "edited"}
    else:
        assert got[3] == {"role": "user", "content": "m2m3m4"}


def test_deleted_replaced_reset_or_reordered_messages_are_not_taken_from_a_kept_render() -> None:
    messages = history(30)
    agg = DefaultAggregator()
    memory = memory_of(*messages)
    agg.aggregate(memory, "a", None, None)
    memory.delete(5)  # a message gone from the middle
    assert agg.aggregate(memory, "a", None, None) == fresh(memory)
    agg.aggregate(memory_of(*messages), "a", None, None)
    replaced = [
        *messages[:10],
        messages[10].model_copy(update={"content": "other"}),
        *messages[11:],
    ]
    assert agg.aggregate(memory_of(*replaced), "a", None, None) == fresh(memory_of(*replaced))
    agg.aggregate(memory_of(*messages), "a", None, None)
    memory.load([m.model_dump() for m in messages[:3]])  # a PUT: new objects, fewer of them
    assert agg.aggregate(memory, "a", None, None) == fresh(memory)
    agg.aggregate(memory_of(*messages), "a", None, None)
    shorter = memory_of(*messages[:12])  # fewer messages than the kept render's
    assert agg.aggregate(shorter, "a", None, None) == fresh(shorter)
    swapped = memory_of(messages[0], messages[2], messages[1], *messages[3:])
    assert agg.aggregate(swapped, "a", None, None) == fresh(swapped)


def test_user_texts_join_across_the_kept_render_and_other_names_do_not_share_it() -> None:
    messages = [AgentMessage(content="a"), AgentMessage(sender="a", content="b")]
    messages.append(AgentMessage(content="c"))  # ends with a user text
    agg = DefaultAggregator()
    agg.aggregate(memory_of(*messages), "a", None, None)
    memory = memory_of(*messages, AgentMessage(content="d"))
    got = agg.aggregate(memory, "a", None, None)
    assert got[-1] == {"role": "user", "content": "cd"}
    assert got == fresh(memory)
    agg.aggregate(memory, "a", None, None)
    # another agent reading the same messages: "a"'s replies are user turns to it
    assert agg.aggregate(memory, "b", None, None) == [{"role": "user", "content": "abcd"}]
    # a system instruction that ends with a user text joins the first message: not kept
    joined = agg.aggregate(memory, "a", None, {"role": "user", "content": "x"})
    assert joined[0] == {"role": "user", "content": "xa"}


def test_messages_that_are_not_text_are_never_kept() -> None:
    result = ActionReturn(result=[{"type": "text", "content": "r"}])
    messages = [AgentMessage(content="a"), AgentMessage(sender="tool", content=result)]
    agg = DefaultAggregator()
    agg.aggregate(memory_of(*messages), "a", None, None)
    result.result = [{"type": "text", "content": "changed in place"}]
    got = agg.aggregate(memory_of(*messages), "a", None, None)
    assert got == [{"role": "user", "content": "achanged in place"}]
