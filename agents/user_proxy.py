"""Byzer-Agent's (AutoGen's) ``UserProxyAgent``: the person in a conversation of named agents,
and ``Conversation``, a user proxy and its peer served as one agent that can wait for the person.

``human_input_mode`` says when the person is asked for the proxy's reply:

- ``"ALWAYS"``: for every message it receives. Their text is the reply; an empty answer lets
  the proxy's automatic replies answer (none without a model: the conversation ends); ``exit``
  ends the conversation.
- ``"TERMINATE"``: only when a message terminates the conversation or the proxy made
  ``max_consecutive_auto_reply`` answers; an empty answer or ``exit`` ends it, a text goes on.
- ``"NEVER"``: never (Byzer-Agent's README uses this, with ``max_consecutive_auto_reply=0``).

The person is asked through ``human_input`` (a callable, sync or async, given the prompt), by
default the console. With ``human_input=WAIT`` the question becomes an approval, a pending
call ``human_input`` (arguments ``{"prompt", "peer"}``): in a ``Conversation`` the turn stops
there (``conversation.pending[session]``) while the conversation waits where it asked, at any
depth, until ``resume`` brings a decision: ``edit({"reply": text})`` answers ``text``,
``approve`` answers nothing (an empty answer), ``deny`` is ``exit``. Outside a
``Conversation`` the proxy raises ``HumanInputRequired`` instead.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import inspect
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Final, Literal

from agents.actions.approval import Decision, PendingApproval, PendingCall, as_decisions
from agents.actions.approval import new_call_id as _new_id
from agents.agent import AsyncAgent, BaseAgent
from agents.conversable import AgentDirectory, ConversableAgent, ReplyResult
from agents.llms.base import AsyncBaseLLM
from agents.memory import SessionId
from agents.schema import AgentMessage

HumanInputMode = Literal["ALWAYS", "TERMINATE", "NEVER"]
WAIT: Final = "wait"  # human_input=WAIT: the question waits for a person (an approval)
HUMAN_INPUT: Final = "human_input"  # the pending call's name
EXIT_WORDS = frozenset({"exit"})


class HumanInputRequired(Exception):
    """The proxy waits for the person's reply to ``peer`` (``human_input=WAIT``)."""

    def __init__(self, call: PendingCall, peer: str) -> None:
        super().__init__(f"waiting for the person's reply to {peer}")
        self.call = call
        self.peer = peer


class UserProxyAgent(ConversableAgent):
    """The person's stand-in in a conversation; asks them per ``human_input_mode``."""

    def __init__(
        self,
        name: str,
        llm: AsyncBaseLLM | None = None,
        retrieval: Any = None,  # Byzer-Agent's argument; this port has no retrieval service
        system_message: str | None = None,
        is_termination_msg: Callable[[AgentMessage], bool] | None = None,
        max_consecutive_auto_reply: int | None = None,
        human_input_mode: HumanInputMode = "ALWAYS",
        *,
        human_input: Callable[[str], Any] | str | None = None,
        agent: BaseAgent | None = None,
        directory: AgentDirectory | None = None,
        **options: Any,
    ) -> None:
        if human_input_mode not in ("ALWAYS", "TERMINATE", "NEVER"):
            raise ValueError("human_input_mode must be 'ALWAYS', 'TERMINATE' or 'NEVER'")
        super().__init__(
            name, llm, retrieval, system_message, is_termination_msg,
            max_consecutive_auto_reply, agent=agent, directory=directory, **options,
        )  # fmt: skip
        self.human_input_mode = human_input_mode
        self.human_input = human_input
        #: Set by a ``Conversation`` while it talks: with ``human_input=WAIT`` the question is
        #: awaited there (the conversation pauses where it stands, at any depth) instead of
        #: raised.
        self.waiter: Callable[[PendingCall, str], Awaitable[str]] | None = None
        self.register_reply(None, UserProxyAgent.check_termination_and_human_reply)

    async def get_human_input(self, prompt: str, peer: str) -> str:
        """The person's answer to ``prompt`` (``human_input``; the console by default)."""
        if self.human_input == WAIT:
            call = PendingCall(_new_id(), HUMAN_INPUT, {"prompt": prompt, "peer": peer})
            if self.waiter is not None:
                return await self.waiter(call, peer)
            raise HumanInputRequired(call, peer)
        if callable(self.human_input):
            answer = self.human_input(prompt)
            if inspect.isawaitable(answer):
                answer = await answer
            return str(answer or "")
        return await asyncio.to_thread(input, prompt)

    async def check_termination_and_human_reply(
        self, message: AgentMessage, history: list[AgentMessage], sender: ConversableAgent
    ) -> ReplyResult:
        """AutoGen's rule: ask the person when the mode says so; their text is the reply."""
        terminating = self.is_termination_msg(message) or (
            self._auto_replies.get(sender.name, 0) >= self.max_consecutive_auto_reply
        )
        if self.human_input_mode == "NEVER":
            return (True, None) if terminating else (False, None)
        if self.human_input_mode == "TERMINATE" and not terminating:
            return False, None
        prompt = f"{sender.name}: {message.content}\n> "
        answer = (await self.get_human_input(prompt, sender.name)).strip()
        return self.human_answer(answer, terminating)

    def human_answer(self, answer: str, terminating: bool) -> ReplyResult:
        """(final, reply) for the person's ``answer``."""
        if answer.lower() in EXIT_WORDS:
            return True, None
        if answer:
            return True, answer
        if self.human_input_mode == "TERMINATE" or terminating:
            return True, None  # nothing to say to a closing message: the conversation ends
        return False, None  # an empty answer: the automatic replies may answer


@dataclass
class _Live:
    """A conversation running in the background: its message queue, and once it asks the
    person, the answer it waits for."""

    queue: asyncio.Queue[Any]
    task: asyncio.Task[None] | None = None
    future: asyncio.Future[tuple[str, contextvars.Context]] | None = None
    call_id: str = ""


class Conversation(AsyncAgent):
    """A user proxy and its peer as one agent: each turn's message starts a conversation
    from the proxy; every message of it is streamed (END chunks with sender and receiver),
    the last one is the reply. A proxy with ``human_input=WAIT`` pauses the turn
    (``pending[session]``, like a tool agent's approval) until ``resume``."""

    def __init__(
        self, user: UserProxyAgent, recipient: ConversableAgent, name: str | None = None
    ) -> None:
        super().__init__(memory=None, name=name or recipient.name)
        self.user = user
        self.recipient = recipient
        self.pending: dict[SessionId, PendingApproval] = {}
        self._live: dict[SessionId, _Live] = {}  # conversations waiting for the person
        for participant in (user, recipient):  # their memories are the session's
            if participant.agent is not None:
                self.__dict__["_registries"]["agent"][participant.name] = participant.agent

    def _scope(self, session_id: SessionId) -> None:
        def same(peer: str) -> SessionId:
            return session_id

        for participant in self.user.directory.agents.values():
            participant.session_of = same

    def _talk(self, session_id: SessionId, start: Any) -> AsyncIterator[AgentMessage]:
        """Run ``start`` (a coroutine that talks) and stream the messages it delivers."""
        self._drop(session_id)
        live = _Live(asyncio.Queue())
        live.task = asyncio.create_task(self._run(start, live.queue))
        return self._drain(session_id, live)

    @staticmethod
    async def _run(start: Any, queue: asyncio.Queue[Any]) -> None:
        """The conversation itself: its messages, a question or a failure go to ``queue``."""
        try:
            await start
        except HumanInputRequired as waiting:  # a proxy asked outside a waiter
            queue.put_nowait(("ask", waiting.call, waiting.peer, None))
        except BaseException as exc:  # re-raised in the stream
            queue.put_nowait(("error", exc))
        finally:
            queue.put_nowait(None)

    async def _ask(self, live: _Live, call: PendingCall, peer: str) -> str:
        """The proxy's question: the stream stops here, the conversation waits for the answer.
        It goes on in the context of the turn that answers (its usage scope, budget checks,
        trace), as if that turn ran it."""
        future: asyncio.Future[tuple[str, contextvars.Context]] = (
            asyncio.get_running_loop().create_future()
        )
        live.queue.put_nowait(("ask", call, peer, future))
        text, context = await future
        for var, value in context.items():
            var.set(value)
        return text

    async def _drain(self, session_id: SessionId, live: _Live) -> AsyncIterator[AgentMessage]:
        """Stream the conversation's messages until it ends or asks the person; a question
        leaves it waiting (``pending[session]``, and the live conversation for ``resume``)."""
        directory = self.user.directory
        before = directory.on_message
        directory.on_message = live.queue.put_nowait
        self.user.waiter = functools.partial(self._ask, live)
        self._scope(session_id)
        paused = False
        try:
            while (item := await live.queue.get()) is not None:
                if isinstance(item, AgentMessage):
                    yield item
                elif item[0] == "error":
                    raise item[1]
                else:  # ("ask", call, peer, future)
                    _, call, peer, future = item
                    self.pending[session_id] = PendingApproval([call], extra={"peer": peer})
                    if future is not None:
                        live.future, live.call_id = future, call.id
                        self._live[session_id] = live
                        paused = True
                    return
        finally:
            directory.on_message = before
            self.user.waiter = None
            if not paused and live.task is not None and not live.task.done():
                live.task.cancel()

    def _drop(self, session_id: SessionId) -> None:
        """Forget a conversation of the session still waiting for the person."""
        live = self._live.pop(session_id, None)
        if live is not None and live.task is not None:
            live.task.cancel()

    async def forward(
        self, *message: AgentMessage, session_id: SessionId = 0, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        text = message[-1].content if message else ""
        last: AgentMessage | None = None
        async for item in self._talk(session_id, self.user.initiate_chat(self.recipient, text)):
            last = item
            yield item
        if last is None:
            yield AgentMessage(sender=self.name, content="")

    def decision(
        self, decisions: Mapping[str, Any] | Iterable[Any], pending: PendingApproval
    ) -> Decision:
        """The one decision for the waiting question (ValueError otherwise)."""
        chosen = as_decisions(decisions)
        ids = [c.id for c in pending.calls]
        if sorted(chosen) != sorted(ids):
            raise ValueError(f"one decision is needed for the pending call {ids}")
        decision = chosen[ids[0]]
        if decision.action == "edit" and not isinstance(
            (decision.arguments or {}).get("reply"), str
        ):
            raise ValueError("an edit of human_input needs {'reply': <text>}")
        return decision

    def resume_stream(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId = 0,
        pending: PendingApproval | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AgentMessage]:
        """Go on with the person's answer (``edit({"reply": text})``, ``approve``: nothing,
        ``deny``: exit). The conversation still waiting in this process gets the answer where
        it asked, however deep (a reply function that asked the person goes on); otherwise
        (e.g. after a restart) the answer is sent to the agent that asked."""
        held = self.pending.pop(session_id, None)
        waiting = pending if pending is not None else held
        if waiting is None:
            raise ValueError("no question of this session waits for the person")
        decision = self.decision(decisions, waiting)
        answer = {"edit": str((decision.arguments or {}).get("reply", "")), "approve": ""}
        text = answer.get(decision.action, "exit")
        live = self._live.pop(session_id, None)
        if live is not None and live.call_id == waiting.calls[0].id and live.future is not None:
            if live.task is not None and not live.task.done():
                return self._continue(self._ended(self._answer(session_id, live, text)), session_id)
        peer = self.user.directory.get(str(waiting.extra.get("peer") or self.recipient.name))
        _, reply = self.user.human_answer(text.strip(), terminating=False)
        return self._continue(self._resumed(session_id, peer, reply), session_id)

    async def _answer(
        self, session_id: SessionId, live: _Live, text: str
    ) -> AsyncIterator[AgentMessage]:
        """Hand the waiting conversation the answer (with this turn's context), then stream
        what it says next."""
        assert live.future is not None
        live.future.set_result((text, contextvars.copy_context()))
        async for item in self._drain(session_id, live):
            yield item

    async def _resumed(
        self, session_id: SessionId, peer: ConversableAgent, reply: Any
    ) -> AsyncIterator[AgentMessage]:
        if reply is None:
            yield AgentMessage(sender=self.name, content="")
            return
        async for item in self._ended(self._talk(session_id, self.user.send(reply, peer))):
            yield item

    async def _ended(self, stream: AsyncIterator[AgentMessage]) -> AsyncIterator[AgentMessage]:
        """``stream``, then an empty message from this agent if it said nothing."""
        last: AgentMessage | None = None
        async for item in stream:
            last = item
            yield item
        if last is None:
            yield AgentMessage(sender=self.name, content="")

    async def resume(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId = 0,
        pending: PendingApproval | None = None,
    ) -> AgentMessage:
        """``resume_stream`` to its last message."""
        reply: AgentMessage | None = None
        async for chunk in self.resume_stream(decisions, session_id, pending):
            reply = chunk
        assert reply is not None
        return reply


__all__ = [
    "HUMAN_INPUT",
    "WAIT",
    "Conversation",
    "HumanInputMode",
    "HumanInputRequired",
    "UserProxyAgent",
]
