"""Agent memory: a list of messages per session (lagent's ``Memory`` and ``MemoryManager``)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

from agents.schema import AgentMessage, AgentStatusCode, ModelStatusCode

SessionId = int | str


class Memory:
    """The messages of one session, oldest first."""

    def __init__(self, recent_n: int | None = None) -> None:
        self.memory: list[AgentMessage] = []
        self.recent_n = recent_n

    def get_memory(
        self,
        recent_n: int | None = None,
        filter_func: Callable[[int, AgentMessage], bool] | None = None,
    ) -> list[AgentMessage]:
        """The last ``recent_n`` messages (all by default), optionally filtered."""
        recent_n = recent_n or self.recent_n
        memory = self.memory[-recent_n:] if recent_n is not None else list(self.memory)
        if filter_func is not None:
            memory = [m for i, m in enumerate(memory) if filter_func(i, m)]
        return memory

    def add(self, memories: AgentMessage | str | Sequence[AgentMessage | str] | None) -> None:
        """Append messages; a string is a message from ``user``."""
        if memories is None:
            return
        items = memories if isinstance(memories, list | tuple) else [memories]
        for item in items:
            if isinstance(item, str):
                item = AgentMessage(sender="user", content=item)
            if isinstance(item, AgentMessage):
                self.memory.append(item)

    def delete(self, index: int | Iterable[int]) -> None:
        """Delete the messages at the given positions (all of them, whatever the order)."""
        indices = [index] if isinstance(index, int) else list(index)
        size = len(self.memory)
        # Normalise negatives and delete from the end, so earlier deletions don't shift later ones.
        for i in sorted({i + size if i < 0 else i for i in indices}, reverse=True):
            del self.memory[i]

    def load(
        self, memories: Sequence[dict[str, Any]] | dict[str, Any], overwrite: bool = True
    ) -> None:
        """Load message dumps (as made by ``save``), replacing the memory unless told not to."""
        if isinstance(memories, dict):
            memories = [memories]
        if not isinstance(memories, list | tuple):
            raise TypeError(f"{type(memories).__name__} is not supported")
        loaded = [load_message(m) for m in memories]
        if overwrite:
            self.memory = []
        self.memory.extend(loaded)

    def save(self) -> list[dict[str, Any]]:
        """Dumps of the messages (``AgentMessage.model_dump()``), oldest first."""
        return [m.model_dump() for m in self.memory]

    def reset(self) -> None:
        """Forget every message."""
        self.memory = []

    def __len__(self) -> int:
        return len(self.memory)

    def __iter__(self) -> Iterator[AgentMessage]:
        return iter(self.memory)


#: What an agent accepts as ``memory=``: a ``Memory`` class or factory, a ``Memory`` whose empty
#: copy starts each session, or the keyword arguments of ``Memory`` (lagent's config dict).
MemorySpec = Callable[[], Memory] | Memory | dict[str, Any]


def load_message(data: dict[str, Any] | str | AgentMessage) -> AgentMessage:
    """An ``AgentMessage`` from a dump (``Memory.save``, a stored row), a message (copied) or a
    string (a message from ``user``); keys that are not message fields are ignored."""
    if isinstance(data, AgentMessage):  # a copy changes to which cannot reach ``data``
        if all(isinstance(value, IMMUTABLE) for value in data.__dict__.values()):
            return data.model_copy()  # nothing in it can change: shared safely
        return data.model_copy(deep=True)
    if isinstance(data, str):
        return AgentMessage(sender="user", content=data)
    if not isinstance(data, dict):
        raise TypeError(f"a message dump must be a dict, got {type(data).__name__}")
    # lagent stores the class as an import path (``__model_spec__``); never import what stored
    # data names: only the message's own fields are read.
    fields = {k: v for k, v in data.items() if k in _FIELDS}
    state = fields.get("stream_state")
    if state is None:
        fields.pop("stream_state", None)  # the default: END
    elif isinstance(state, int) and not isinstance(state, AgentStatusCode | ModelStatusCode):
        # A JSON int would validate as ModelStatusCode (first in the union) and print wrong.
        fields["stream_state"] = AgentStatusCode(state)
    return AgentMessage.model_validate(fields)


_FIELDS = frozenset(AgentMessage.model_fields)
# Field values a shallow copy of a message may share with the original: none can be changed.
IMMUTABLE = (str, int, float, bool, type(None))


def memory_factory(spec: MemorySpec) -> Callable[[], Memory]:
    """Turn an agent's ``memory=`` argument into a factory of empty memories."""
    if isinstance(spec, Memory):
        template = copy.deepcopy(spec)
        template.memory = []
        return lambda: copy.deepcopy(template)
    if isinstance(spec, dict):
        kwargs = dict(spec)
        cls = kwargs.pop("type", Memory)
        if not callable(cls):
            raise TypeError("memory 'type' must be a class, not an import path")
        return lambda: cls(**kwargs)
    if callable(spec):
        return spec
    raise TypeError(f"unsupported memory spec: {spec!r}")


class MemoryManager:
    """One ``Memory`` per session id; reading an unknown session gives nothing, never a KeyError."""

    def __init__(self, cfg: MemorySpec = Memory) -> None:
        self.cfg = cfg
        self._factory = memory_factory(cfg)
        self.memory_map: dict[SessionId, Memory] = {}

    def create_instance(self, session_id: SessionId = 0) -> Memory:
        """Start an empty memory for ``session_id`` (replacing any existing one)."""
        memory = self._factory()
        self.memory_map[session_id] = memory
        return memory

    def _ensure(self, session_id: SessionId) -> Memory:
        memory = self.memory_map.get(session_id)
        return memory if memory is not None else self.create_instance(session_id)

    def get(self, session_id: SessionId = 0) -> Memory | None:
        """The session's ``Memory``, or None if it has none yet."""
        return self.memory_map.get(session_id)

    def get_memory(self, session_id: SessionId = 0, **kwargs: Any) -> list[AgentMessage]:
        """The session's messages (``[]`` for an unknown session)."""
        memory = self.memory_map.get(session_id)
        return memory.get_memory(**kwargs) if memory is not None else []

    def add(self, memory: Any, session_id: SessionId = 0, **kwargs: Any) -> None:
        """Append messages to the session's memory, creating it if needed."""
        self._ensure(session_id).add(memory, **kwargs)

    def delete(self, index: int | Iterable[int], session_id: SessionId = 0) -> None:
        """Delete messages by position from the session's memory (no-op for an unknown session)."""
        memory = self.memory_map.get(session_id)
        if memory is not None:
            memory.delete(index)

    def load(self, memories: Sequence[dict[str, Any]], session_id: SessionId = 0) -> None:
        """Replace the session's memory with message dumps."""
        self._ensure(session_id).load(list(memories))

    def reset(self, session_id: SessionId = 0) -> None:
        """Drop the session's memory entirely."""
        self.memory_map.pop(session_id, None)

    def sessions(self) -> list[SessionId]:
        """Session ids that currently have a memory."""
        return list(self.memory_map)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self.memory_map
