"""Sessions' loaded memories kept in process, so a turn does not reload and re-validate history.

An entry holds the validated messages of every memory key of a session's agent together with
the session's ``memory_rev`` when they were stored. A turn uses the entry only when the
database still has that revision (one integer read in a transaction the turn makes anyway);
any other writer (PUT memory, reset, a turn on another replica) bumps the revision and so
invalidates it. Entries are dropped on any turn that does not end cleanly.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from agents.memory import Memory
from agents.schema import AgentMessage

Lists = dict[str, list[AgentMessage]]


@dataclass
class CachedMemory:
    """A session's messages per memory key, valid while the stored revision is ``rev``."""

    rev: int
    lists: Lists

    def count(self) -> int:
        """Messages held."""
        return sum(len(v) for v in self.lists.values())


class MemoryCache:
    """An LRU of session memories keyed by session pk, bounded in sessions and in messages
    (a session with more messages than the whole bound is not kept)."""

    def __init__(self, size: int = 512, max_messages: int = 100_000) -> None:
        self.size = size
        self.max_messages = max_messages
        self.messages = 0  # held now, over all entries
        self._entries: OrderedDict[str, CachedMemory] = OrderedDict()

    def get(self, session_pk: str, rev: int) -> Lists | None:
        """The cached lists if they are of revision ``rev`` (a stale entry is dropped)."""
        entry = self._entries.get(session_pk)
        if entry is None:
            return None
        if entry.rev != rev:
            self.drop(session_pk)
            return None
        self._entries.move_to_end(session_pk)
        return entry.lists

    def put(self, session_pk: str, rev: int, lists: Lists) -> None:
        """Remember ``lists`` (copied) as revision ``rev``; evicts the least recently used."""
        self.drop(session_pk)
        entry = CachedMemory(rev, {k: list(v) for k, v in lists.items()})
        count = entry.count()
        if self.size <= 0 or count > self.max_messages:
            return
        self._entries[session_pk] = entry
        self.messages += count
        while len(self._entries) > self.size or self.messages > self.max_messages:
            _, evicted = self._entries.popitem(last=False)
            self.messages -= evicted.count()

    def drop(self, session_pk: str) -> None:
        """Forget a session (its turn did not end cleanly, or its memory was replaced)."""
        entry = self._entries.pop(session_pk, None)
        if entry is not None:
            self.messages -= entry.count()

    def __len__(self) -> int:
        return len(self._entries)


def memory_nodes(agent: Any) -> dict[str, Any] | None:
    """``state_dict`` key -> the (sub-)agent owning that memory; None for agents this module
    cannot read directly (they fall back to ``state_dict``/``load_state_dict``)."""
    from agents.agent import BaseAgent

    if not isinstance(agent, BaseAgent):
        return None
    nodes: dict[str, Any] = {}

    def walk(node: BaseAgent, prefix: str) -> None:
        if node.memory is not None:
            nodes[prefix + "memory"] = node
        for name, child in node.named_agents():
            walk(child, f"{prefix}{name}.")

    walk(agent, "")
    return nodes


def plain_memories(nodes: dict[str, Any], session_key: str) -> dict[str, Memory] | None:
    """A fresh memory of ``session_key`` per key, to fill directly; None (and nothing created)
    when one is not a plain ``Memory`` holding a list (then use ``load_state_dict``)."""
    memories = {key: node.memory.create_instance(session_key) for key, node in nodes.items()}
    if all(isinstance(m, Memory) and isinstance(m.memory, list) for m in memories.values()):
        return memories
    for node in nodes.values():
        node.memory.reset(session_key)
    return None


def current(nodes: dict[str, Any], session_key: str) -> Lists:
    """Each key's messages now (the agent's own list objects, not copies)."""
    out: Lists = {}
    for key, node in nodes.items():
        memory = node.memory.get(session_key)
        out[key] = memory.memory if memory is not None else []
    return out
