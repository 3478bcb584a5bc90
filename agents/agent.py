"""Agents: one async streaming core (``BaseAgent._stream``), a sync and an async front.

A call runs: before_agent hooks → inputs to memory → ``forward`` → reply to memory →
after_agent hooks. ``forward`` may return a message or a string, be a coroutine, or be an
async generator of ``AgentMessage`` chunks; the default one streams the LLM's reply.

One module of ~330 lines on purpose: the sync and async fronts are thin views of the one
streaming core, and a call's lifecycle (hooks, memory, forward) reads best in one place.
"""

from __future__ import annotations

import asyncio
import copy
import inspect
import sys
import warnings
from collections.abc import AsyncIterator, Awaitable, Iterable, Iterator
from typing import Any

from agents import tracing
from agents.aggregator import DefaultAggregator, SystemInstruction
from agents.hooks import Hook, RemovableHandle, apply_hooks
from agents.llms.base import AsyncBaseLLM
from agents.memory import IMMUTABLE, Memory, MemoryManager, MemorySpec, SessionId, load_message
from agents.schema import AgentMessage, AgentStatusCode

MessageInput = AgentMessage | str | list[AgentMessage | str]
_END = AgentStatusCode.END
_STREAM_ING = AgentStatusCode.STREAM_ING
_CALLING = AgentStatusCode.PLUGIN_START


class BaseAgent:
    """What ``Agent`` and ``AsyncAgent`` share: state, registration, and the streaming core."""

    def __init__(
        self,
        llm: AsyncBaseLLM | None = None,
        template: SystemInstruction | None = None,
        memory: MemorySpec | None = Memory,
        output_format: Any = None,
        aggregator: DefaultAggregator | None = None,
        name: str | None = None,
        description: str | None = None,
        hooks: Iterable[Hook] | Hook | None = None,
    ) -> None:
        self.name: str = name or type(self).__name__
        self.llm = llm
        self.memory: MemoryManager | None = MemoryManager(memory) if memory is not None else None
        self.output_format = output_format
        self.template = template
        self.description = description
        self.aggregator = aggregator if aggregator is not None else DefaultAggregator()
        self._hooks: dict[int, Hook] = {}
        for hook in [hooks] if isinstance(hooks, Hook) else hooks or []:
            self.register_hook(hook)

    # -- registration (PyTorch-module-like) -------------------------------------------------
    def __setattr__(self, name: str, value: Any) -> None:
        # Per turn an agent is built with ~10 attributes: a private name (never registered) or
        # a plain value (never an agent, an LLM or an executor) skips the kind test.
        registries = self.__dict__.get("_registries")
        if registries is None:
            registries = self.__dict__["_registries"] = {"agent": {}, "llm": {}, "executor": {}}
        if name[:1] != "_":
            for registry in registries.values():
                if registry:
                    registry.pop(name, None)
            kind = None if type(value) in _PLAIN else _kind_of(value)
            if kind is not None:
                registries[kind][name] = value
        super().__setattr__(name, value)

    def __delattr__(self, name: str) -> None:
        for registry in self.__dict__.get("_registries", {}).values():
            registry.pop(name, None)
        super().__delattr__(name)

    @property
    def _agents(self) -> dict[str, BaseAgent]:
        return dict(self.__dict__.get("_registries", {}).get("agent", {}))

    def named_agents(self) -> Iterator[tuple[str, BaseAgent]]:
        """Direct sub-agents, in assignment order."""
        yield from self._agents.items()

    def named_llms(self, prefix: str = "") -> Iterator[tuple[str, AsyncBaseLLM]]:
        """LLMs of this agent and its sub-agents, as dotted names (``writer.llm``)."""
        yield from self._named("llm", prefix)

    def named_executors(self, prefix: str = "") -> Iterator[tuple[str, Any]]:
        """Action executors of this agent and its sub-agents, as dotted names."""
        yield from self._named("executor", prefix)

    def _named(self, kind: str, prefix: str) -> Iterator[tuple[str, Any]]:
        for name, value in self.__dict__.get("_registries", {}).get(kind, {}).items():
            yield prefix + name, value
        for name, agent in self.named_agents():
            yield from agent._named(kind, f"{prefix}{name}.")

    def register_hook(self, hook: Hook) -> RemovableHandle:
        """Add a hook; ``handle.remove()`` takes it away again."""
        handle = RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    # -- memory as state ---------------------------------------------------------------------
    def update_memory(self, message: Any, session_id: SessionId = 0) -> None:
        """Append messages to this agent's memory of ``session_id``."""
        if self.memory is not None:
            self.memory.add(message, session_id=session_id)

    def clear_history(self, start: int = -2, end: int = -1, session_id: SessionId = 0) -> None:
        """langroid's ``clear_history``: delete the session's messages ``start`` .. ``end``
        (inclusive; negative ``start`` counts from the end; ``end=-1``: to the last one)."""
        memory = self.memory.get(session_id) if self.memory is not None else None
        if memory is None:
            return
        n = len(memory.memory)
        first = max(0, n + start) if start < 0 else start
        del memory.memory[first : n if end == -1 else end + 1]

    async def llm_response_forget_async(
        self, message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AgentMessage:
        """langroid's ``llm_response_forget``: the model's reply to ``message`` after the
        session's history, leaving the history as it was."""
        memory = self.memory.get(session_id) if self.memory is not None else None
        kept = list(memory.memory) if memory is not None else None
        inputs = _to_messages((message,))
        if memory is not None:
            memory.add(inputs)
        try:
            reply: AgentMessage | None = None
            async for chunk in self._generate(tuple(inputs), session_id, **kwargs):
                reply = chunk
            assert reply is not None
            return reply
        finally:
            if memory is not None and kept is not None:
                memory.memory = kept

    def llm_response_forget(
        self, message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AgentMessage:
        """``llm_response_forget_async`` from sync code."""
        from agents.utils import run_sync

        return run_sync(self.llm_response_forget_async(message, session_id, **kwargs))

    def state_dict(self, session_id: SessionId = 0) -> dict[str, list[dict[str, Any]]]:
        """Every memory of the session: ``{'memory': [...], 'writer.memory': [...]}``."""
        state: dict[str, list[dict[str, Any]]] = {}
        if self.memory is not None:
            memory = self.memory.get(session_id)
            state["memory"] = memory.save() if memory is not None else []
        for name, child in self.named_agents():
            state.update({f"{name}.{k}": v for k, v in child.state_dict(session_id).items()})
        return state

    def state_keys(self) -> list[str]:
        """The keys of ``state_dict`` (one per agent with memory), without dumping anything."""
        keys = ["memory"] if self.memory is not None else []
        for name, child in self.named_agents():
            keys += [f"{name}.{key}" for key in child.state_keys()]
        return keys

    def load_state_dict(self, state: dict[str, Any], session_id: SessionId = 0) -> None:
        """Replace the session's memories with ``state`` (as made by ``state_dict``)."""
        expected = self.state_keys()
        missing = set(expected) - set(state)
        if missing:
            raise KeyError(f"Missing keys: {sorted(missing)}")
        extra = set(state) - set(expected)
        if extra:
            warnings.warn(f"Mismatch keys which are not used: {sorted(extra)}", stacklevel=2)
        # Validate everything before touching any memory, so a bad dump changes nothing.
        loaded = {key: [load_message(m) for m in state[key] or []] for key in expected}
        for key, messages in loaded.items():
            node = self._resolve(key.split(".")[:-1])
            assert node.memory is not None
            node.memory.create_instance(session_id).memory = messages

    def reset(
        self, session_id: SessionId = 0, keypath: str | None = None, recursive: bool = False
    ) -> None:
        """Forget the session: this agent's memory, a sub-agent's (``keypath``), or all."""
        if keypath and recursive:
            raise ValueError("keypath and recursive can't be used together")
        if keypath:
            self._resolve(keypath.split(".")).reset(session_id)
            return
        if self.memory is not None:
            self.memory.reset(session_id)
        if recursive:
            for _, agent in self.named_agents():
                agent.reset(session_id, recursive=True)

    def _resolve(self, path: list[str]) -> BaseAgent:
        node: BaseAgent = self
        for part in path:
            agents = node._agents
            if part not in agents:
                raise KeyError(f"No sub-agent named {part!r} in {node!r}")
            node = agents[part]
        return node

    # -- the core -----------------------------------------------------------------------------
    def system_instruction(self) -> SystemInstruction | None:
        """The system prompt of the next model call (tool agents add their tools' text)."""
        return self.template

    async def forward(
        self, *message: AgentMessage, session_id: SessionId = 0, **kwargs: Any
    ) -> Any:
        """Default: stream the LLM's reply to the aggregated memory. A reply that does not
        parse in the output format is shown its error once (the reply and the error join the
        memory); a second one raises ``OutputParseError``."""
        from agents.parsers import OutputParseError, feedback, parse_error

        inputs = message
        for attempt in range(2):
            reply: AgentMessage | None = None
            async for chunk in self._generate(inputs, session_id, **kwargs):
                if chunk.stream_state == _END:
                    reply = chunk
                else:
                    yield chunk
            assert reply is not None
            error = parse_error(reply.formatted)
            if error is None:
                yield reply
                return
            if attempt == 1:
                raise OutputParseError(self.name, error, str(reply.content))
            shown = AgentMessage(sender="user", content=feedback(error))
            if self.memory is not None:
                self.update_memory([reply, shown], session_id=session_id)
            else:
                inputs = (*inputs, reply, shown)

    async def _generate(
        self, inputs: tuple[AgentMessage, ...], session_id: SessionId, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """One model turn: STREAM_ING chunks with the text so far (PLUGIN_START chunks, the text
        and then the arguments, while a native call is being written), then the parsed reply."""
        if self.llm is None:
            raise ValueError(f"{self.name} has no llm; pass one or override forward()")
        history = self.memory.get(session_id) if self.memory is not None else None
        if history is None:
            history = Memory()
            history.add(list(inputs))
        formatted = self.aggregator.aggregate(
            history, self.name, self.output_format, self.system_instruction()
        )
        text = ""
        arguments = ""  # a native call's arguments as the backend streams them
        tool_calls: list[dict[str, Any]] = []  # native calls a backend reported (extra)
        async for delta in self.llm.astream(formatted, **kwargs):
            tool_calls += delta.extra.get("tool_calls") or []
            if delta.text:
                text += delta.text
                yield AgentMessage(sender=self.name, content=text, stream_state=_STREAM_ING)
            pieces = delta.extra.get("tool_call_deltas")
            if pieces:  # the call being written (lagent's PLUGIN_START): text, then arguments
                arguments += "".join(
                    str((p.get("function") or {}).get("arguments") or "") for p in pieces
                )
                if arguments:
                    content = text + arguments
                    yield AgentMessage(sender=self.name, content=content, stream_state=_CALLING)
        parsed = None
        try:
            if getattr(self.output_format, "accepts_tool_calls", False):  # NativeToolFormat
                parsed = self.output_format.parse_response(text, tool_calls=tool_calls)
            elif self.output_format:
                parsed = self.output_format.parse_response(text)
        except ValueError as exc:  # a parser that raises (pydantic's errors too): an error
            parsed = {"status": -1, "data": None, "message": str(exc)}
        yield AgentMessage(sender=self.name, content=text, formatted=parsed)

    def _stream(
        self, *message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """One turn's chunks; a tracing hook point (``agents/tracing.py``: ``invoke_agent``)."""
        stream = self._continue(self._turn(message, session_id, kwargs), session_id)
        tracer = tracing.TRACER
        return stream if tracer is None else tracer.agent(self, session_id, stream)

    async def _turn(
        self, message: tuple[MessageInput, ...], session_id: SessionId, kwargs: dict[str, Any]
    ) -> AsyncIterator[Any]:
        """before_agent hooks, the inputs into memory, then ``forward`` called: its chunks
        (its last is the reply, which ``_continue`` stores), as an async iterator that
        ``_continue`` reads directly (every chunk of a turn passes through each generator
        layer on its way out: this is not one)."""
        hooked = await apply_hooks(
            self._hooks.values(), "before_agent", self, _to_messages(message), session_id
        )
        inputs = _to_messages((hooked,)) if isinstance(hooked, AgentMessage | str) else hooked
        self.update_memory(inputs, session_id=session_id)
        forward = self.forward
        if inspect.isasyncgenfunction(forward) or inspect.iscoroutinefunction(forward):
            result = forward(*inputs, session_id=session_id, **kwargs)
        else:
            # A sync forward (lagent style) may block or drive sync sub-agents: run it off-loop.
            result = await asyncio.to_thread(forward, *inputs, session_id=session_id, **kwargs)
        if inspect.isawaitable(result):
            result = await result
        if hasattr(result, "__anext__"):
            return result  # type: ignore[no-any-return]
        if inspect.isgenerator(result):
            return _off_loop(result)
        return _single(result)

    async def _continue(
        self,
        chunks: AsyncIterator[Any] | Awaitable[AsyncIterator[Any]],
        session_id: SessionId,
    ) -> AsyncIterator[AgentMessage]:
        """Pass ``chunks`` on; the last is the reply: stored in memory, then after_agent.
        ``chunks`` may be ``_turn``'s coroutine: awaited first, its stream closed at the end."""
        owned: AsyncIterator[Any] | None = None
        if not hasattr(chunks, "__anext__"):
            chunks = owned = await chunks
        held: AgentMessage | None = None  # an END chunk: the reply, unless more chunks follow
        last: Any = None
        try:
            async for chunk in chunks:  # type: ignore[union-attr]
                if held is not None:
                    yield held
                    held = None
                if isinstance(chunk, AgentMessage) and chunk.stream_state != _END:
                    yield chunk
                else:
                    held = chunk if isinstance(chunk, AgentMessage) else None
                last = chunk
        finally:
            aclose = getattr(owned, "aclose", None)
            if aclose is not None:
                await aclose()
        reply = self._as_reply(last)
        self.update_memory(reply, session_id=session_id)
        reply = _detached(reply)
        yield await apply_hooks(self._hooks.values(), "after_agent", self, reply, session_id)

    def _as_reply(self, result: Any) -> AgentMessage:
        if isinstance(result, AgentMessage):
            return (
                result
                if result.stream_state == _END
                else result.model_copy(update={"stream_state": _END})
            )
        return AgentMessage(sender=self.name, content=result)

    async def _collect(
        self, *message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AgentMessage:
        reply: AgentMessage | None = None
        async for chunk in self._stream(*message, session_id=session_id, **kwargs):
            reply = chunk
        assert reply is not None
        return reply

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name='{self.name}', description='{self.description or ''}')"


class AsyncAgent(BaseAgent):
    """The async agent: ``await agent(msg)`` or ``async for chunk in agent.stream(msg)``."""

    async def __call__(
        self, *message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AgentMessage:
        """Run one turn and return the reply (the collected stream)."""
        return await self._collect(*message, session_id=session_id, **kwargs)

    def stream(
        self, *message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """Run one turn: STREAM_ING / tool-state chunks, then the END reply."""
        return self._stream(*message, session_id=session_id, **kwargs)


class Agent(BaseAgent):
    """The sync agent: the same core, driven from sync code."""

    def __call__(
        self, *message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> AgentMessage:
        """Run one turn and return the reply (the collected stream)."""
        from agents.utils import run_sync

        return run_sync(self._collect(*message, session_id=session_id, **kwargs))

    def stream(
        self, *message: MessageInput, session_id: SessionId = 0, **kwargs: Any
    ) -> Iterator[AgentMessage]:
        """Run one turn as a generator of chunks, ending with the END reply."""
        from agents.utils import iterate_sync

        return iterate_sync(self._stream(*message, session_id=session_id, **kwargs))


async def _off_loop(chunks: Iterator[Any]) -> AsyncIterator[Any]:
    """A sync forward's generator, each step in a worker thread."""
    done = object()
    while (item := await asyncio.to_thread(next, chunks, done)) is not done:
        yield item


async def _single(result: Any) -> AsyncIterator[Any]:
    """A forward's one result as a stream."""
    yield result


def _to_messages(message: tuple[MessageInput, ...]) -> list[AgentMessage]:
    """Inputs as copied messages (``_detached``: changes to a copy cannot reach the caller's
    message); a string is a message from ``user``."""
    out: list[AgentMessage] = []
    for item in message:
        for m in item if isinstance(item, list) else [item]:
            copied = AgentMessage(sender="user", content=m) if isinstance(m, str) else _detached(m)
            out.append(copied)
    return out


def _detached(message: AgentMessage) -> AgentMessage:
    """A copy of ``message`` that changes to it cannot reach (the caller's reply, apart from
    the one in memory): a shallow copy when every field is immutable (a plain text reply, its
    enums included), else a deep one."""
    if all(isinstance(value, IMMUTABLE) for value in message.__dict__.values()):
        return message.model_copy()
    if message.__pydantic_extra__ or message.__pydantic_private__:
        return copy.deepcopy(message)
    # Mutable fields of plain JSON values (a turn's input: its parts, its ``extra_info``):
    # copied by ``_plain_copy``, the same tree ``copy.deepcopy`` makes in a fraction of its
    # calls; anything else (another type, a container met twice) falls back to it.
    copied = message.model_copy()
    fields = copied.__dict__
    seen: set[int] = set()
    try:
        for name, value in fields.items():
            if not isinstance(value, IMMUTABLE):
                fields[name] = _plain_copy(value, seen)
    except _NotPlain:
        return copy.deepcopy(message)
    return copied


class _NotPlain(Exception):
    """A value ``_plain_copy`` does not copy."""


_ATOMS = frozenset({str, int, float, bool, type(None)})


def _plain_copy(value: Any, seen: set[int]) -> Any:
    """A copy of a tree of dicts and lists of str, int, float, bool and None (exact types);
    ``_NotPlain`` for anything else, or a container met twice (``copy.deepcopy`` keeps the
    sharing)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is not dict and kind is not list:
        raise _NotPlain
    if id(value) in seen:
        raise _NotPlain
    seen.add(id(value))
    if kind is dict:
        out = {}
        for key, item in value.items():
            if type(key) not in _ATOMS:
                raise _NotPlain
            out[key] = item if type(item) in _ATOMS else _plain_copy(item, seen)
        return out
    return [item if type(item) in _ATOMS else _plain_copy(item, seen) for item in value]


# Values that are never an agent, an LLM or an executor (exact types: no subclass).
_PLAIN = frozenset({str, int, float, bool, type(None), dict, list, tuple})
_EXECUTORS: tuple[Any, tuple[type, ...]] = (None, ())  # (their module, its executor classes)


def _kind_of(value: Any) -> str | None:
    global _EXECUTORS
    if isinstance(value, BaseAgent):
        return "agent"
    if isinstance(value, AsyncBaseLLM):
        return "llm"
    # No import of agents.actions here: if its module isn't loaded, no executor can exist.
    executors = sys.modules.get("agents.actions.executor")
    if executors is None:
        return None
    module, classes = _EXECUTORS
    if module is not executors:
        names = ("ActionExecutor", "AsyncActionExecutor")
        classes = tuple(getattr(executors, n) for n in names if hasattr(executors, n))
        if len(classes) == len(names):  # (not while the module is still being imported)
            _EXECUTORS = (executors, classes)
    return "executor" if classes and isinstance(value, classes) else None


__all__ = ["Agent", "AsyncAgent", "BaseAgent"]
