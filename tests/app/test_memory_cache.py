"""The in-process LRU of session memories: revisions, and its bounds in sessions and messages."""

from __future__ import annotations

from agents.schema import AgentMessage
from app.runtime.memory_cache import MemoryCache


def msgs(n: int) -> list[AgentMessage]:
    return [AgentMessage(sender="user", content=str(i)) for i in range(n)]


def test_an_entry_serves_only_its_revision_and_a_stale_one_is_dropped() -> None:
    cache = MemoryCache()
    cache.put("s", 3, {"memory": msgs(2)})
    hit = cache.get("s", 3)
    assert hit is not None and [m.content for m in hit["memory"]] == ["0", "1"]
    assert cache.get("s", 4) is None
    assert cache.get("s", 3) is None  # dropped when it disagreed
    assert len(cache) == 0 and cache.messages == 0


def test_the_stored_lists_are_copies() -> None:
    cache = MemoryCache()
    lists = {"memory": msgs(1)}
    cache.put("s", 1, lists)
    lists["memory"].append(AgentMessage(sender="user", content="later"))
    hit = cache.get("s", 1)
    assert hit is not None and len(hit["memory"]) == 1


def test_least_recently_used_sessions_go_first_within_both_bounds() -> None:
    cache = MemoryCache(size=2, max_messages=10)
    cache.put("a", 1, {"memory": msgs(4)})
    cache.put("b", 1, {"memory": msgs(4)})
    assert cache.get("a", 1) is not None  # "b" is now the least recently used
    cache.put("c", 1, {"memory": msgs(4)})  # over both bounds: "b" goes
    assert cache.get("b", 1) is None
    assert cache.get("a", 1) is not None and cache.get("c", 1) is not None
    assert cache.messages == 8
    cache.put("huge", 1, {"memory": msgs(11)})  # larger than the whole bound: not kept
    assert cache.get("huge", 1) is None and cache.messages == 8
    cache.put("a", 2, {"memory": msgs(5)})  # replacing an entry recounts it
    assert cache.messages == 9
    cache.drop("a")
    assert cache.messages == 4 and len(cache) == 1
