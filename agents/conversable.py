"""Named agents that message each other (Byzer-Agent's / AutoGen's conversable agents).

Agents join an ``AgentDirectory`` under a name; ``await alice.send("hi", "Bob")`` delivers an
``AgentMessage(sender="Alice", receiver="Bob")`` through the directory. A receiving agent
answers with the first of its reply functions that claims the message: ``register_reply(
trigger, fn)`` adds ``fn(agent, message, history, sender) -> (final, reply)`` (sync or async),
tried newest first; ``trigger`` filters by sender (a name, a list of names, an agent class, a
predicate, or None for anyone). ``final=True`` stops the chain: ``reply`` (None: no answer) is
sent back to the sender, which may answer again, and so on. A reply may be a string, an
``AgentMessage`` or Byzer-Agent's ``{"content": ..., "metadata": {...}}`` (the metadata becomes
the message's ``extra_info``). A conversation stops when a message is a termination message
(``TERMINATE`` in its content, or ``metadata={"TERMINATE": True}``, by default) or an agent made
``max_consecutive_auto_reply`` answers in a row to the same peer. History is kept per peer
(``chat_messages[peer]``, ``get_chat_messages()``); every delivered message is also in
``directory.transcript``. ``stream_reply(gen)`` answers with a stream a receiver reads with
``get_agent_stream_messages(agent, stream_id)``.
"""

from __future__ import annotations

import functools
import inspect
import re
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from agents.agent import AsyncAgent, BaseAgent
from agents.llms.base import AsyncBaseLLM
from agents.schema import AgentMessage

ReplyResult = tuple[bool, Any]
ReplyFunc = Callable[..., ReplyResult | Awaitable[ReplyResult]]
Trigger = str | type | Callable[[Any], bool] | Iterable[Any] | None
TERMINATE = "TERMINATE"


class AgentDirectory:
    """Agents by name; delivers messages by their ``receiver`` and records them all."""

    def __init__(
        self, on_message: Callable[[AgentMessage], Any] | None = None, *, implicit: bool = False
    ) -> None:
        self.agents: dict[str, ConversableAgent] = {}
        self.transcript: list[AgentMessage] = []
        self.on_message = on_message
        #: Made for an agent created without one: it joins the directory of the first agent
        #: it talks with (as Byzer-Agent's agents reach each other without any directory).
        self.implicit = implicit

    def absorb(self, other: AgentDirectory) -> None:
        """Take ``other``'s agents (and transcript) in: they are reachable from here on."""
        if other is self:
            return
        for name, agent in other.agents.items():
            if self.agents.get(name, agent) is not agent:
                raise ValueError(f"an agent named {name!r} is already registered")
        for agent in other.agents.values():
            self.agents[agent.name] = agent
            agent.directory = self
        self.transcript[:0] = other.transcript
        other.agents.clear()

    def register(self, agent: ConversableAgent) -> None:
        """Make ``agent`` reachable by its name."""
        if agent.name in self.agents and self.agents[agent.name] is not agent:
            raise ValueError(f"an agent named {agent.name!r} is already registered")
        self.agents[agent.name] = agent

    def get(self, name: str) -> ConversableAgent:
        """The agent called ``name``; KeyError naming the known ones otherwise."""
        try:
            return self.agents[name]
        except KeyError:
            known = ", ".join(sorted(self.agents)) or "none"
            raise KeyError(f"no agent named {name!r} (known: {known})") from None

    async def deliver(self, message: AgentMessage, request_reply: bool = True) -> None:
        """Hand ``message`` to ``message.receiver`` (which may answer its sender)."""
        if not message.receiver:
            raise ValueError("a message to deliver needs a receiver")
        recipient = self.get(message.receiver)
        sender = self.get(message.sender)
        self.transcript.append(message)
        if self.on_message is not None:
            out = self.on_message(message)
            if inspect.isawaitable(out):
                await out
        await recipient.receive(message, sender, request_reply)


class ConversableAgent:
    """An agent with a name, per-peer history and a chain of reply functions."""

    #: ``max_consecutive_auto_reply=None`` means this many (AutoGen's is 100).
    MAX_CONSECUTIVE_AUTO_REPLY = 10

    def __init__(
        self,
        name: str,
        llm: AsyncBaseLLM | None = None,
        retrieval: Any = None,  # Byzer-Agent's argument; this port has no retrieval service
        system_message: str | None = None,
        is_termination_msg: Callable[[AgentMessage], bool] | None = None,
        max_consecutive_auto_reply: int | None = None,
        human_input_mode: str = "NEVER",
        *,
        agent: BaseAgent | None = None,
        directory: AgentDirectory | None = None,
        description: str | None = None,
        **options: Any,
    ) -> None:
        """Byzer-Agent's arguments in its order (``name, llm, retrieval, system_message,
        is_termination_msg, max_consecutive_auto_reply, human_input_mode``); ``agent``: an
        agent that answers instead of ``llm``; ``directory``: where names resolve (default:
        the directory of the first agent this one talks with). Other Byzer-LLM options
        (``code_execution_config``, ``chat_wrapper``, ...) are kept in ``options``, unused."""
        if human_input_mode != "NEVER" and type(self) is ConversableAgent:
            raise ValueError(
                "a ConversableAgent never asks a person: use agents.user_proxy.UserProxyAgent "
                f"for human_input_mode={human_input_mode!r}"
            )
        self.retrieval = retrieval
        self.description = description
        self.options = options
        self.name = name
        if agent is None and llm is not None:
            agent = AsyncAgent(llm, template=system_message, name=name)
        self.agent = agent  # answers with one memory per peer (session id = the peer's name)
        self.directory = directory if directory is not None else AgentDirectory(implicit=True)
        self.directory.register(self)
        if max_consecutive_auto_reply is None:
            max_consecutive_auto_reply = self.MAX_CONSECUTIVE_AUTO_REPLY
        self.max_consecutive_auto_reply = max_consecutive_auto_reply
        self.is_termination_msg = is_termination_msg or is_terminate
        self.chat_messages: dict[str, list[AgentMessage]] = {}
        self._streams: dict[str, Any] = {}  # stream_reply's generators, by stream id
        #: The session an agent's memory of ``peer`` is kept under (a server sets it so that
        #: the memory is the session's).
        self.session_of: Callable[[str], Any] = lambda peer: peer
        self._auto_replies: dict[str, int] = {}
        self._reply_funcs: list[tuple[Trigger, ReplyFunc]] = []
        self.register_reply(None, ConversableAgent.agent_reply)
        self.register_reply(None, ConversableAgent.check_termination)
        self._register_decorated()

    def _register_decorated(self) -> None:
        """Methods marked ``@agent_reply(...)``, registered in the order the class defines them,
        each first in line (so the last defined is tried first, before the built-in replies):
        Byzer-Agent's rule, hence its advice to define a catch-all reply at the class's head."""
        marked: list[tuple[str, Any]] = []
        for klass in reversed(type(self).__mro__):
            for attr, value in vars(klass).items():
                if hasattr(value, _REPLY_MARK):
                    marked = [m for m in marked if m[0] != attr] + [(attr, value)]
        for attr, func in marked:
            trigger = getattr(func, _REPLY_MARK)
            if callable(trigger) and not isinstance(trigger, type):
                trigger = _lazy_trigger(self, trigger)
            self.register_reply(trigger, getattr(type(self), attr))

    # -- reply functions -------------------------------------------------------------------
    def register_reply(self, trigger: Trigger, reply_func: ReplyFunc, position: int = 0) -> None:
        """Add ``reply_func`` for senders matching ``trigger``; position 0 is tried first."""
        self._reply_funcs.insert(position, (trigger, reply_func))

    def _matches(self, trigger: Trigger, sender: ConversableAgent) -> bool:
        if trigger is None:
            return True
        if isinstance(trigger, str):
            return trigger == sender.name
        if isinstance(trigger, type):
            return isinstance(sender, trigger)
        if callable(trigger):
            return bool(trigger(sender))
        return any(self._matches(t, sender) for t in trigger)

    async def generate_reply(self, message: AgentMessage, sender: ConversableAgent) -> Any:
        """The first final answer of the reply functions that match ``sender`` (None: none)."""
        history = self.chat_messages.get(sender.name, [])
        for trigger, func in self._reply_funcs:
            if not self._matches(trigger, sender):
                continue
            out = func(self, message, history, sender)
            final, reply = await out if inspect.isawaitable(out) else out
            if final:
                return reply
        return None

    async def check_termination(
        self, message: AgentMessage, history: list[AgentMessage], sender: ConversableAgent
    ) -> ReplyResult:
        """No answer to a termination message or past ``max_consecutive_auto_reply``."""
        if self.is_termination_msg(message):
            return True, None
        if self._auto_replies.get(sender.name, 0) >= self.max_consecutive_auto_reply:
            return True, None
        return False, None

    async def agent_reply(
        self, message: AgentMessage, history: list[AgentMessage], sender: ConversableAgent
    ) -> ReplyResult:
        """The wrapped agent's answer (its memory of this peer is its session ``sender``)."""
        if self.agent is None:
            return False, None
        reply = await self.agent._collect(message, session_id=self.session_of(sender.name))
        return True, reply.content

    # -- Byzer-Agent's streams and history -----------------------------------------------------
    def stream_reply(self, response_gen: Any, contexts: list[Any] | None = None) -> ReplyResult:
        """Byzer-Agent's streamed answer: ``return self.stream_reply(gen)`` from a reply function.
        The reply's content is a stream id and its metadata ``{"agent", "stream": True,
        "stream_id", "contexts", "TERMINATE": True}``; the receiver reads the pieces with
        ``get_agent_stream_messages(metadata["agent"], metadata["stream_id"])``. ``gen`` may
        be an iterable or async iterable of strings or ``(text, metadata)`` pairs."""
        stream_id = str(uuid.uuid4())
        self._streams[stream_id] = response_gen
        metadata = {
            "agent": self.name,
            "stream": True,
            "stream_id": stream_id,
            "contexts": list(contexts or []),
            "TERMINATE": True,
        }
        return True, {"content": stream_id, "metadata": metadata}

    async def get_agent_stream_messages(
        self, agent: str | ConversableAgent, stream_id: str
    ) -> AsyncIterator[tuple[str, Any]]:
        """The pieces of ``agent``'s stream ``stream_id`` as ``(text, metadata)`` pairs (each
        stream is read once)."""
        owner = self.directory.get(agent) if isinstance(agent, str) else agent
        source = owner._streams.pop(stream_id, None)
        if source is None:
            raise KeyError(f"{owner.name} has no stream {stream_id!r}")
        if hasattr(source, "__aiter__"):
            async for item in source:
                yield _piece(item)
        else:
            for item in source:
                yield _piece(item)

    @property
    def _messages(self) -> dict[str, list[AgentMessage]]:
        """Byzer-Agent's name for ``chat_messages`` (its README reads ``self._messages``)."""
        return self.chat_messages

    def get_chat_messages(self) -> dict[str, list[AgentMessage]]:
        """Byzer-Agent's ``get_chat_messages``: every peer's history, by the peer's name."""
        return self.chat_messages

    # -- messaging ---------------------------------------------------------------------------
    async def send(
        self, message: Any, recipient: str | ConversableAgent, request_reply: bool = True
    ) -> None:
        """Send to an agent (or its name) in the directory; it may answer back."""
        name = recipient if isinstance(recipient, str) else recipient.name
        if not isinstance(recipient, str):
            self.meet(recipient)
        msg = as_message(message, self.name, name)
        self.chat_messages.setdefault(name, []).append(msg)
        await self.directory.deliver(msg, request_reply)

    def meet(self, peer: ConversableAgent) -> None:
        """Make ``peer`` reachable by name: an implicit directory (an agent made without
        one) joins the other side's; two explicit directories must be the same."""
        mine, theirs = self.directory, peer.directory
        if mine is theirs:
            return
        if theirs.implicit:
            mine.absorb(theirs)
        elif mine.implicit:
            theirs.absorb(mine)
        else:
            raise ValueError(
                f"{self.name!r} and {peer.name!r} are in different AgentDirectory objects"
            )

    async def receive(
        self, message: AgentMessage, sender: ConversableAgent, request_reply: bool = True
    ) -> None:
        """Store ``message``; unless told not to, answer its sender."""
        self.chat_messages.setdefault(sender.name, []).append(message)
        if not request_reply:
            return
        reply = await self.generate_reply(message, sender)
        if reply is None:
            return
        self._auto_replies[sender.name] = self._auto_replies.get(sender.name, 0) + 1
        await self.send(reply, sender)

    async def initiate_chat(
        self, recipient: str | ConversableAgent, message: Any = None, clear_history: bool = True
    ) -> None:
        """Start a conversation (resets the auto-reply counters of both sides for it;
        ``clear_history``: both sides forget their earlier messages with each other)."""
        peer = self.directory.get(recipient) if isinstance(recipient, str) else recipient
        self._auto_replies.pop(peer.name, None)
        peer._auto_replies.pop(self.name, None)
        if clear_history:
            self.chat_messages.pop(peer.name, None)
            peer.chat_messages.pop(self.name, None)
        await self.send(message, peer)

    def last_message(self, peer: str | ConversableAgent) -> AgentMessage | None:
        """The last message exchanged with ``peer``."""
        name = peer if isinstance(peer, str) else peer.name
        messages = self.chat_messages.get(name) or []
        return messages[-1] if messages else None

    def reset(self) -> None:
        """Forget every conversation."""
        self.chat_messages.clear()
        self._auto_replies.clear()
        if self.agent is not None:
            self.agent.reset(recursive=True)
            for peer in list(self.agent.memory.sessions() if self.agent.memory else []):
                self.agent.reset(peer)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(name={self.name!r})"


_REPLY_MARK = "__agent_reply_trigger__"


def agent_reply(trigger: Any = None) -> Callable[[Any], Any]:
    """Byzer-Agent's ``@byzerllm.agent_reply(...)``: mark a method as a reply function
    ``(self, raw_message, messages, sender, config=None) -> (final, reply)``. ``trigger``
    filters senders like ``register_reply``'s, or is ``lambda self: [...]`` (agents or names,
    read when a message arrives)."""

    def mark(func: Any) -> Any:
        setattr(func, _REPLY_MARK, trigger)
        return func

    return mark


def _lazy_trigger(agent: Any, make: Callable[..., Any]) -> Callable[[Any], bool]:
    """A ``lambda self: [...]`` trigger as a sender predicate."""
    try:
        takes_self = len(inspect.signature(make).parameters) == 1
    except (TypeError, ValueError):
        takes_self = False

    def matches(sender: Any) -> bool:
        if not takes_self:
            return bool(make(sender))
        names = {x if isinstance(x, str) else getattr(x, "name", None) for x in make(agent)}
        return sender.name in names

    return matches


class Agents:
    """Byzer-Agent's ``Agents`` factory."""

    @staticmethod
    def create_local_agent(
        cls: type[ConversableAgent], name: str, llm: Any = None, retrieval: Any = None,
        *args: Any, **kwargs: Any,
    ) -> ConversableAgent:  # fmt: skip
        """``cls(name, llm, retrieval, *args, **kwargs)``: the agent, made here."""
        return cls(name, llm, retrieval, *args, **kwargs)

    @staticmethod
    def create_remote_agent(
        cls: type[ConversableAgent] | str, name: str, llm: Any = None, retrieval: Any = None,
        *args: Any, directory: AgentDirectory | None = None, api_key: str | None = None,
        **kwargs: Any,
    ) -> ConversableAgent:  # fmt: skip
        """Byzer-Agent's remote agent, in one of two forms.

        ``create_remote_agent(AgentB, "bob", llm, retrieval, ...)`` (Byzer-Agent's call): there
        is no Ray cluster to start an actor on, so the agent is made in this process, as
        ``create_local_agent`` makes it; it is reached by name and answers like the actor
        would (replies, streams, termination).

        ``create_remote_agent(url, "bob", directory=..., api_key=...)``: an agent that lives
        on another server (an AgentStation's ``/a2a/<agent>/``, or any A2A server), spoken
        to over A2A through ``agents.remote.RemoteAgent`` (``kwargs`` go to it: ``headers``,
        ``timeout_s``, ...)."""
        if isinstance(cls, str):
            from agents.remote import RemoteAgent

            remote = RemoteAgent(cls, name=name, api_key=api_key, **kwargs)
            return ConversableAgent(name, agent=remote, directory=directory)
        if not (isinstance(cls, type) and issubclass(cls, ConversableAgent)):
            raise TypeError(
                "create_remote_agent takes a ConversableAgent subclass (Byzer-Agent's call: "
                "the agent runs here) or the A2A URL of an agent on another server, not "
                f"{type(cls).__name__}"
            )
        if directory is not None:
            kwargs["directory"] = directory
        if api_key is not None:
            raise TypeError("api_key is for the URL form (an agent on another server)")
        return Agents.create_local_agent(cls, name, llm, retrieval, *args, **kwargs)

    create_remote_detached_agent = create_remote_agent


def get_agent_name(agent: ConversableAgent | str) -> str:
    """Byzer-Agent's ``get_agent_name``: an agent's name (a name as is)."""
    return agent if isinstance(agent, str) else agent.name


def prompt(*_: Any, **__: Any) -> Callable[[Any], Any]:
    """Byzer-LLM's ``@byzerllm.prompt()`` on a method without a model: calling it returns its
    docstring, dedented, with ``{{ name }}`` replaced by the call's arguments."""

    def wrap(func: Any) -> Any:
        template = inspect.cleandoc(func.__doc__ or "")
        signature = inspect.signature(func)

        def render(*args: Any, **kwargs: Any) -> str:
            bound = signature.bind(*args, **kwargs)
            bound.apply_defaults()
            text = template
            for key, value in bound.arguments.items():
                if key == "self":
                    continue
                pattern = r"\{\{\s*" + re.escape(key) + r"\s*\}\}"
                text = re.sub(pattern, str(value).replace("\\", "\\\\"), text)
            return text

        return functools.wraps(func)(render)

    return wrap


@dataclass
class ChatResponse:
    """Byzer-Agent's ``ChatResponse`` (a reply function may answer one)."""

    status: int
    output: str
    code: str
    prompt: str
    variables: dict[str, Any] = field(default_factory=dict)
    raw_output: str = ""


#: Byzer-Agent's type names: its ``Agent`` and Ray's actor handle are conversable agents here.
Agent = ConversableAgent
ClientActorHandle = ConversableAgent


def is_terminate(message: AgentMessage) -> bool:
    """Byzer-Agent's termination: ``TERMINATE`` in the content or ``metadata["TERMINATE"]``."""
    meta = message.extra_info
    if isinstance(meta, dict) and meta.get("TERMINATE"):
        return True
    return TERMINATE in str(message.content or "")


def as_message(message: Any, sender: str, receiver: str) -> AgentMessage:
    """A reply (a string, an ``AgentMessage``, ``{"content", "metadata"}`` or a
    ``ChatResponse``: its ``output``, the rest in ``extra_info``) as a message."""
    if isinstance(message, AgentMessage):
        return message.model_copy(update={"sender": sender, "receiver": receiver})
    if isinstance(message, ChatResponse):
        info = {k: v for k, v in vars(message).items() if k != "output"}
        return AgentMessage(
            sender=sender, receiver=receiver, content=message.output, extra_info=info
        )
    if isinstance(message, dict) and "content" in message:
        meta = message.get("metadata")
        return AgentMessage(
            sender=sender, receiver=receiver, content=message["content"],
            extra_info=dict(meta) if isinstance(meta, dict) and meta else None,
        )  # fmt: skip
    return AgentMessage(sender=sender, receiver=receiver, content=message)


def _piece(item: Any) -> tuple[str, Any]:
    if isinstance(item, tuple) and len(item) == 2:
        return str(item[0]), item[1]
    if isinstance(item, AgentMessage):
        return str(item.content), item.extra_info
    return str(item), None


__all__ = [
    "TERMINATE",
    "Agent",
    "AgentDirectory",
    "Agents",
    "ChatResponse",
    "ClientActorHandle",
    "ConversableAgent",
    "ReplyFunc",
    "agent_reply",
    "as_message",
    "get_agent_name",
    "is_terminate",
    "prompt",
]
