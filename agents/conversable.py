"""Named agents that message each other (Byzer-Agent's / AutoGen's conversable agents).

Agents join an ``AgentDirectory`` under a name; ``await alice.send("hi", "Bob")`` delivers an
``AgentMessage(sender="Alice", receiver="Bob")`` through the directory. A receiving agent
answers with the first of its reply functions that claims the message: ``register_reply(
trigger, fn)`` adds ``fn(agent, message, history, sender) -> (final, reply)`` (sync or async),
tried newest first; ``trigger`` filters by sender (a name, a list of names, an agent class, a
predicate, or None for anyone). ``final=True`` stops the chain: ``reply`` (None: no answer) is
sent back to the sender, which may answer again, and so on. A conversation stops when a message
is a termination message (``TERMINATE`` in its content by default) or an agent made
``max_consecutive_auto_reply`` answers in a row to the same peer. History is kept per peer
(``chat_messages[peer]``); every delivered message is also in ``directory.transcript``.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Iterable
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

    def __init__(self, on_message: Callable[[AgentMessage], Any] | None = None) -> None:
        self.agents: dict[str, ConversableAgent] = {}
        self.transcript: list[AgentMessage] = []
        self.on_message = on_message

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

    def __init__(
        self,
        name: str,
        llm: AsyncBaseLLM | None = None,
        system_message: str | None = None,
        agent: BaseAgent | None = None,
        directory: AgentDirectory | None = None,
        max_consecutive_auto_reply: int = 10,
        is_termination_msg: Callable[[AgentMessage], bool] | None = None,
    ) -> None:
        self.name = name
        if agent is None and llm is not None:
            agent = AsyncAgent(llm, template=system_message, name=name)
        self.agent = agent  # answers with one memory per peer (session id = the peer's name)
        self.directory = directory if directory is not None else AgentDirectory()
        self.directory.register(self)
        self.max_consecutive_auto_reply = max_consecutive_auto_reply
        self.is_termination_msg = is_termination_msg or (
            lambda m: TERMINATE in str(m.content or "")
        )
        self.chat_messages: dict[str, list[AgentMessage]] = {}
        self._auto_replies: dict[str, int] = {}
        self._reply_funcs: list[tuple[Trigger, ReplyFunc]] = []
        self.register_reply(None, ConversableAgent.agent_reply)
        self.register_reply(None, ConversableAgent.check_termination)

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
        reply = await self.agent._collect(message, session_id=sender.name)
        return True, reply.content

    # -- messaging ---------------------------------------------------------------------------
    async def send(
        self, message: Any, recipient: str | ConversableAgent, request_reply: bool = True
    ) -> None:
        """Send to an agent (or its name) in the directory; it may answer back."""
        name = recipient if isinstance(recipient, str) else recipient.name
        if isinstance(message, AgentMessage):
            msg = message.model_copy(update={"sender": self.name, "receiver": name})
        else:
            msg = AgentMessage(sender=self.name, receiver=name, content=message)
        self.chat_messages.setdefault(name, []).append(msg)
        await self.directory.deliver(msg, request_reply)

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

    async def initiate_chat(self, recipient: str | ConversableAgent, message: Any) -> None:
        """Start a conversation (resets the auto-reply counters of both sides for it)."""
        peer = self.directory.get(recipient) if isinstance(recipient, str) else recipient
        self._auto_replies.pop(peer.name, None)
        peer._auto_replies.pop(self.name, None)
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


__all__ = ["TERMINATE", "AgentDirectory", "ConversableAgent", "ReplyFunc"]
