"""Memory and MemoryManager."""

from __future__ import annotations

import pytest

from agents.memory import Memory, MemoryManager
from agents.schema import AgentMessage, AgentStatusCode


def _contents(memory: Memory) -> list[str]:
    return [m.content for m in memory.get_memory()]


def test_add_strings_messages_and_lists() -> None:
    memory = Memory()
    memory.add("a")
    memory.add(AgentMessage(sender="bot", content="b"))
    memory.add(["c", AgentMessage(sender="x", content="d")])
    memory.add(None)
    assert _contents(memory) == ["a", "b", "c", "d"]
    assert memory.get_memory()[0].sender == "user"


def test_recent_n_and_filter() -> None:
    memory = Memory(recent_n=2)
    memory.add(["a", "b", "c"])
    assert _contents(memory) == ["b", "c"]
    assert [m.content for m in memory.get_memory(recent_n=3)] == ["a", "b", "c"]
    assert [m.content for m in memory.get_memory(filter_func=lambda i, m: i == 0)] == ["b"]


def test_delete_several_indices_deletes_exactly_those() -> None:
    memory = Memory()
    memory.add(["a", "b", "c", "d", "e"])
    memory.delete([1, 3])  # naive in-order deletion would remove b and e
    assert _contents(memory) == ["a", "c", "e"]
    memory.delete(-1)
    assert _contents(memory) == ["a", "c"]
    memory.delete([0, -1])
    assert _contents(memory) == []


def test_save_load_round_trip_ignores_import_paths() -> None:
    memory = Memory()
    memory.add([AgentMessage(sender="bot", content={"k": [1]}, formatted={"status": 1}), "u"])
    dumped = memory.save()
    assert dumped[0]["stream_state"] == AgentStatusCode.END
    dumped[0]["__model_spec__"] = "os.system"  # lagent stores a class path; never imported
    other = Memory()
    other.add("old")
    other.load(dumped)
    assert other.save() == memory.save()
    other.load(dumped[1], overwrite=False)
    assert _contents(other)[-1] == "u" and len(other.memory) == 3
    with pytest.raises(TypeError):
        other.load("not a list")  # type: ignore[arg-type]


def test_manager_sessions_are_separate_and_unknown_ones_are_empty() -> None:
    manager = MemoryManager(Memory)
    assert manager.get_memory("nobody") == []
    assert manager.get("nobody") is None
    manager.delete(0, session_id="nobody")  # no KeyError
    manager.reset("nobody")
    manager.add("hi", session_id=1)
    manager.add("yo", session_id=2)
    assert [m.content for m in manager.get_memory(1)] == ["hi"]
    assert [m.content for m in manager.get_memory(2)] == ["yo"]
    assert 1 in manager and sorted(manager.sessions()) == [1, 2]
    manager.add(["a", "b"], session_id=1)
    manager.delete([0, 2], session_id=1)
    assert [m.content for m in manager.get_memory(1)] == ["a"]
    manager.reset(1)
    assert manager.get_memory(1) == [] and 1 not in manager
    assert [m.content for m in manager.get_memory(2)] == ["yo"]


def test_manager_memory_specs() -> None:
    template = Memory(recent_n=1)
    template.add("not copied into new sessions")
    for spec in (template, {"recent_n": 1}, {"type": Memory, "recent_n": 1}, lambda: Memory(1)):
        manager = MemoryManager(spec)
        manager.add(["a", "b"], session_id="s")
        assert [m.content for m in manager.get_memory("s")] == ["b"]
    with pytest.raises(TypeError):
        MemoryManager({"type": "lagent.memory.Memory"})
