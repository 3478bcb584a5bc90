"""The prompt built from a whole history: same messages as the plain per-message rules, and the
memory is only read (a session's history is aggregated on every model call)."""

from __future__ import annotations

from typing import Any

from agents.aggregator import DefaultAggregator
from agents.hooks import action_return_text
from agents.memory import Memory
from agents.schema import ActionReturn, AgentMessage
from app.models.scripted import count_words


def _reference(messages: list[AgentMessage], name: str, system: str | None) -> list[dict[str, Any]]:
    """DefaultAggregator's rules, written plainly."""
    out: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
    for m in messages:
        if m.sender == name:
            out.append({"role": "assistant", "content": str(m.content)})
            continue
        content = (
            action_return_text(m.content) if isinstance(m.content, ActionReturn) else m.content
        )
        last = out[-1] if out else None
        if (
            last
            and last["role"] == "user"
            and isinstance(last["content"], str)
            and isinstance(content, str)
        ):
            last["content"] += content
        else:
            out.append({"role": "user", "content": content})
    return out


def _history() -> list[AgentMessage]:
    tool = ActionReturn(result=[{"type": "text", "content": "42"}])
    return [
        AgentMessage(sender="user", content="a"),
        AgentMessage(sender="user", content="b"),  # merged with "a"
        AgentMessage(sender="bot", content="c"),
        AgentMessage(sender="bot", content={"k": 1}),  # str() for the model
        AgentMessage(sender="tool", content=tool),
        AgentMessage(sender="user", content=["x"]),  # not text: its own turn
        AgentMessage(sender="user", content="d"),
    ]


def test_aggregate_matches_the_rules_and_only_reads_memory() -> None:
    memory = Memory()
    memory.add(_history())
    before = [m.model_copy(deep=True) for m in memory.memory]
    for system in (None, "be brief"):
        got = DefaultAggregator().aggregate(memory, "bot", None, system)
        assert got == _reference(before, "bot", system)
    assert memory.memory == before  # nothing merged into the stored messages
    recent = Memory(recent_n=2)
    recent.add(_history())
    assert DefaultAggregator().aggregate(recent, "bot") == _reference(_history()[-2:], "bot", None)


def test_count_words_counts_each_text_once_and_stays_right() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "one two  three"},
        {"role": "assistant", "content": None},
        {"role": "user", "content": ["a b", "c"]},  # counted as its str()
        {"role": "user", "content": ""},
    ]
    expected = sum(len(str(m.get("content") or "").split()) for m in messages)
    assert count_words(messages) == expected == count_words(messages)
    long = [{"role": "user", "content": "w " * 3_000_000}] * 4  # past the kept-text bound
    assert count_words(long) == 12_000_000
