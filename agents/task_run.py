"""One run of a ``Task``: steps of responders until a termination rule fires.

Each step offers the pending message to the responders in order: the agent's tools (only for
the model's tool calls), the model, the human (if any), then the sub-tasks. A responder never
answers its own message; a message addressed to someone (``receiver``) goes only to them. The
first one that answers makes the new pending message; a step where nobody answers is a stalled
step. Every message is streamed (END chunks with ``sender`` and ``receiver``; the model's text
as STREAM_ING chunks before it), sub-tasks' own messages included; the last one carries the
run's status in ``extra_info``.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import TYPE_CHECKING, Any

from agents.llms.base import Usage
from agents.schema import ActionValidCode, AgentMessage, AgentStatusCode
from agents.task_types import Entity, StatusCode, repeating_cycle, result_info

if TYPE_CHECKING:
    from agents.task import Task

_END = AgentStatusCode.END
QUIT_WORDS = frozenset({"q", "x", "quit", "exit"})
Step = tuple[str, AgentMessage | None]  # ("chunk", message to stream) / ("final", response)


class _Stop(Exception):
    """A responder ended the whole run (a sub-task killed or quit by the user)."""

    def __init__(self, status: StatusCode) -> None:
        super().__init__(status.value)
        self.status = status


class TaskRun:
    """The state of one run: pending message, counters, history."""

    def __init__(
        self, task: Task, session_id: Any, turns: int | None, usage: Usage, kwargs: dict[str, Any]
    ) -> None:
        self.task = task
        self.agent: Any = task.agent  # a ToolAgent (model_turn, run_tool) or any agent
        self.session_id = session_id
        self.limit = turns if turns is not None else task.max_turns
        self.usage = usage
        self.kwargs = {**task.gen_params, **kwargs}
        self.last_sub: str | None = None  # the sub-task that answered last (round robin)
        self.history: list[tuple[str, str]] = []
        self.remembered: set[int] = set()  # ids of messages already in the agent's memory
        self.turns = 0
        self.caller = "user"

    # -- responders --------------------------------------------------------------------------
    def responders(self) -> list[str]:
        names = [Entity.AGENT, Entity.LLM]
        if self.task.interactive or self.task.user is not None:
            names.append(Entity.USER)
        subs = list(self.task.sub_tasks)
        if self.task.round_robin and self.last_sub in subs:
            cut = subs.index(self.last_sub) + 1
            subs = subs[cut:] + subs[:cut]
        return names + subs

    def display(self, entity: str) -> str:
        """The name a responder's messages carry."""
        return self.agent.name if entity in (Entity.LLM, Entity.AGENT) else entity

    def eligible(
        self, entity: str, pending: AgentMessage | None, sender: str | None, to: str | None
    ) -> bool:
        if entity == sender:
            return False
        if to is not None and to not in (self.display(entity), entity):
            return False  # addressed to another responder
        if entity == Entity.AGENT:
            return sender == Entity.LLM and pending is not None and self.task.wants_tool(pending)
        if entity == Entity.LLM:
            return pending is None or not (sender == Entity.LLM)
        return pending is not None and str(pending.content or "").strip() != ""

    def respond(self, entity: str, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        if entity == Entity.AGENT:
            return self._tools(pending)
        if entity == Entity.LLM:
            return self._llm(pending)
        if entity == Entity.USER:
            return self._user(pending)
        return self._sub_task(entity, pending)

    def _remember(self, message: AgentMessage | None) -> None:
        if message is not None and id(message) not in self.remembered:
            self.agent.update_memory(message, session_id=self.session_id)
            self.remembered.add(id(message))

    async def _llm(self, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        inputs = () if pending is None else (pending,)
        reply: AgentMessage | None = None
        if self.task.tool_loop:  # one model call: its tool calls are the tools' to answer
            self._remember(pending)
            stream = self.agent.model_turn(inputs, self.session_id, **self.kwargs)
        else:  # the agent itself (hooks, memory, its own forward) is the responder
            stream = self.agent._stream(*inputs, session_id=self.session_id, **self.kwargs)
        async with aclosing(stream):
            async for chunk in stream:
                if reply is not None:  # an earlier message of a multi-message agent
                    yield "chunk", reply
                reply = chunk if chunk.stream_state == _END else None
                if reply is None:
                    yield "chunk", chunk
        if reply is not None and self.task.tool_loop:
            self._remember(reply)
        empty = reply is None or (str(reply.content or "").strip() == "" and not reply.formatted)
        yield "final", None if empty else reply

    async def _tools(self, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        assert pending is not None
        result = await self.agent.run_tool(pending, self.session_id)
        self._remember(result)
        yield "final", result

    async def _user(self, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        answer = self.task.user(pending) if self.task.user else await _ask_console(pending)
        if inspect.isawaitable(answer):
            answer = await answer
        text = str(answer or "").strip()
        if text.lower() in QUIT_WORDS:
            raise _Stop(StatusCode.USER_QUIT)
        yield "final", AgentMessage(sender="user", content=text) if text else None

    async def _sub_task(self, name: str, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        sub = self.task.sub_tasks[name]
        last: AgentMessage | None = None
        inputs = [] if pending is None else [pending.model_copy(update={"receiver": name})]
        stream: Any = sub._stream(*inputs, session_id=self.session_id)  # an async generator
        async with aclosing(stream):
            async for chunk in stream:
                if last is not None:
                    yield "chunk", last
                last = chunk if chunk.stream_state == _END else None
                if last is None:
                    yield "chunk", chunk
        info = last.extra_info if last is not None and isinstance(last.extra_info, dict) else {}
        status = info.get("status")
        if status in (StatusCode.KILL.value, StatusCode.USER_QUIT.value):
            raise _Stop(StatusCode(status))
        if last is None or str(last.content or "").strip() == "":
            yield "final", None
            return
        yield (
            "final",
            AgentMessage(
                sender=name, content=last.content, extra_info={"task": name, "status": status}
            ),
        )

    # -- the loop ----------------------------------------------------------------------------
    async def steps(self, initial: AgentMessage | None) -> AsyncIterator[AgentMessage]:
        task = self.task
        pending, sender = initial, None
        caller = self.caller = initial.sender if initial is not None else "user"
        to = initial.receiver if initial is not None else None
        to = None if to == task.name else to
        stalled = 0
        while True:
            if task.killed:
                yield self._final(StatusCode.KILL, None, caller)
                return
            response, entity, tried = None, None, []
            try:
                for name in self.responders():
                    if not self.eligible(name, pending, sender, to):
                        continue
                    tried.append(name)
                    async with aclosing(self.respond(name, pending)) as replies:
                        async for kind, message in replies:
                            if kind == "final":
                                response = message
                            elif message is not None:
                                yield message
                            if task.killed:
                                break
                    if task.killed:
                        break
                    if response is not None:
                        entity = name
                        break
            except _Stop as stop:
                yield self._final(stop.status, None, caller)
                return
            if task.killed:
                yield self._final(StatusCode.KILL, None, caller)
                return
            self.turns += 1
            if response is None or entity is None:
                stalled += 1
                status = None
                if any(name in task.done_if_no_response for name in tried):
                    status = StatusCode.DONE
                elif stalled >= task.max_stalled_steps:
                    status = StatusCode.STALLED
                elif self.limit is not None and self.turns >= self.limit:
                    status = StatusCode.MAX_TURNS
                if status is not None:
                    content = pending.content if status == StatusCode.DONE and pending else None
                    yield self._final(status, content, caller)
                    return
                continue
            stalled = 0
            if entity in task.sub_tasks:
                self.last_sub = entity
            to = response.receiver  # an explicit address (a model's or a handler's choice)
            response = self._addressed(entity, response)
            self.history.append((entity, str(response.content)))
            status = self._status_after(entity, response)
            if status is not None:
                yield self._tag(response, status, caller)
                return
            yield response
            pending, sender = response, entity

    def _status_after(self, entity: str, response: AgentMessage) -> StatusCode | None:
        task = self.task
        formatted = response.formatted if isinstance(response.formatted, dict) else {}
        if entity == Entity.AGENT and formatted.get("valid") == int(ActionValidCode.FINISH):
            return StatusCode.DONE
        calling = entity == Entity.LLM and task.wants_tool(response)  # not an answer yet
        if entity in task.done_if_response and not calling:
            return StatusCode.DONE
        if task.single_round and not calling and entity != Entity.AGENT:
            return StatusCode.DONE  # the first answer outside a tool exchange
        if task.is_done(response):
            return StatusCode.DONE
        if task.budget is not None and task.budget.exceeded(self.usage):
            return StatusCode.BUDGET
        if repeating_cycle(self.history, task.loop_repeats, task.max_cycle_len):
            return StatusCode.INF_LOOP
        if self.limit is not None and self.turns >= self.limit:
            return StatusCode.MAX_TURNS
        return None

    def _addressed(self, entity: str, message: AgentMessage) -> AgentMessage:
        """The message with its sender's name and, unless set, whom it goes to."""
        receiver = message.receiver
        if receiver is None:
            if entity == Entity.LLM and self.task.wants_tool(message):
                receiver = "tools"
            elif entity != Entity.LLM:
                receiver = self.agent.name
            else:
                others = [n for n in self.responders()[2:] if n != entity]
                receiver = others[0] if others else self.caller
        sender = self.display(entity)
        if entity == Entity.AGENT:  # a tool result: from the tool that made it
            formatted = message.formatted if isinstance(message.formatted, dict) else {}
            sender = str(formatted.get("type") or message.sender)
        return message.model_copy(update={"receiver": receiver, "sender": sender})

    def _tag(self, message: AgentMessage, status: StatusCode, caller: str) -> AgentMessage:
        cost = self.task.budget.cost(self.usage) if self.task.budget else 0.0
        info = result_info(self.task.name, status, self.turns, self.usage, cost)
        extra = message.extra_info if isinstance(message.extra_info, dict) else {}
        return message.model_copy(update={"extra_info": {**extra, **info}, "receiver": caller})

    def _final(self, status: StatusCode, content: Any, caller: str) -> AgentMessage:
        message = AgentMessage(sender=self.task.name, content=content or "")
        return self._tag(message, status, caller)


async def _ask_console(pending: AgentMessage | None) -> str:
    prompt = f"{pending.sender}: {pending.content}\n> " if pending is not None else "> "
    return await asyncio.to_thread(input, prompt)


__all__ = ["QUIT_WORDS", "TaskRun"]
