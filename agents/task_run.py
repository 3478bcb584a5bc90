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
import re
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from agents.chat_document import chat_document, plain_message
from agents.langroid_tools import user_method
from agents.llms.base import Usage
from agents.schema import ActionValidCode, AgentMessage, AgentStatusCode
from agents.task_types import (
    DONE,
    NO_ANSWER,
    PASS,
    PASS_TO,
    SEND_TO,
    Entity,
    StatusCode,
    repeating_cycle,
    result_info,
)

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


@dataclass(frozen=True)
class RunLimits:
    """``Task.run``'s ``max_cost`` / ``max_tokens`` (0: no limit), as langroid's run has."""

    max_cost: float = 0
    max_tokens: int = 0

    @staticmethod
    def prices(task: Task) -> tuple[float, float]:
        """(prompt, completion) cost per 1k tokens: the task's budget's, else the model's
        ``chat_cost_per_1k_tokens`` (langroid's setting)."""
        budget = task.budget
        if budget is not None and (budget.prompt_cost_per_1k or budget.completion_cost_per_1k):
            return budget.prompt_cost_per_1k, budget.completion_cost_per_1k
        per_1k = getattr(getattr(task.agent, "llm", None), "chat_cost_per_1k_tokens", None)
        if isinstance(per_1k, tuple | list) and len(per_1k) == 2:
            return float(per_1k[0]), float(per_1k[1])
        return 0.0, 0.0

    def priced(self, task: Task) -> bool:
        return any(self.prices(task))

    def status(self, task: Task, usage: Usage) -> StatusCode | None:
        if self.max_tokens > 0 and usage.total_tokens > self.max_tokens:
            return StatusCode.MAX_TOKENS
        if self.max_cost > 0:
            prompt, completion = self.prices(task)
            cost = (usage.prompt_tokens * prompt + usage.completion_tokens * completion) / 1000
            if cost > self.max_cost:
                return StatusCode.MAX_COST
        return None


def is_no_answer(message: AgentMessage | None) -> bool:
    """langroid: a reply that is ``DO-NOT-KNOW`` (punctuation aside) is no answer."""
    text = str(message.content or "") if message is not None else ""
    return re.sub(r"[,.!?:]", "", text.strip()) == NO_ANSWER


def parse_addressed(content: str, addressing: str) -> tuple[str | None, str]:
    """langroid's ``parse_addressed_message``: the last ``<addressing>name`` and what follows."""
    matches = list(re.finditer(rf"{re.escape(addressing)}(\w+)[^\w]", content + " "))
    if not matches:
        return None, content
    last = matches[-1]
    return last.group(1), (content + " ")[last.end() :].strip()


class TaskRun:
    """The state of one run: pending message, counters, history."""

    def __init__(
        self,
        task: Task,
        session_id: Any,
        turns: int | None,
        usage: Usage,
        kwargs: dict[str, Any],
        caller: Task | None = None,
        limits: RunLimits | None = None,
    ) -> None:
        self.task = task
        self.parent = caller
        self.limits = limits or RunLimits()
        self.agent: Any = task.agent  # a ToolAgent (model_turn, run_tool) or any agent
        self.session_id = session_id
        caps = [n for n in (turns, task.max_turns) if n is not None]
        self.limit = min(caps) if caps else None
        #: langroid: reaching the run's own ``turns`` is FIXED_TURNS (an intended stop, with
        #: a result); reaching the task's ``max_turns`` is MAX_TURNS.
        self.turns_status = (
            StatusCode.FIXED_TURNS
            if turns is not None and (task.max_turns is None or turns < task.max_turns)
            else StatusCode.MAX_TURNS
        )
        self.usage = usage
        self.kwargs = {**task.gen_params, **kwargs}
        self.last_sub: str | None = None  # the sub-task that answered last (round robin)
        self.history: list[tuple[str, str]] = []
        self.remembered: set[int] = set()  # ids of messages already in the agent's memory
        self.turns = 0
        self.caller = "user"
        self.sender: str | None = None  # the responder that sent the pending message
        self._customs: dict[str, Any] | None = None

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
            if pending is not None and self._custom("agent_response") is not None:
                return sender != Entity.AGENT  # the program's own agent_response decides
            if pending is None or sender == Entity.USER or (sender is None and not self.parent):
                return False  # tools never run from the person's text (langroid's rule)
            if sender == Entity.LLM:
                return self.task.wants_tool(pending) or self._has_fallback()
            return self._foreign_call(pending) is not None
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
            stored = message
            if isinstance(message.extra_info, dict) and message.extra_info.get("fallback"):
                # The model reads the agent's answer as a user turn (langroid: AGENT -> LLM).
                stored = message.model_copy(update={"sender": "user"})
            self.agent.update_memory(stored, session_id=self.session_id)
            self.remembered.add(id(message))

    def _custom(self, responder: str) -> Any:
        """The agent's own ``<responder>_async`` or ``<responder>`` (langroid's overridable
        ``llm_response`` / ``agent_response``), when the program's class defines one."""
        if self._customs is None:
            self._customs = {
                name: user_method(self.agent, f"{name}_async") or user_method(self.agent, name)
                for name in ("llm_response", "agent_response")
            }
        return self._customs[responder]

    async def _custom_response(
        self, entity: str, pending: AgentMessage | None, sender: str | None
    ) -> AgentMessage | None:
        """The program's own ``llm_response`` / ``agent_response`` (``entity``) answer to
        ``pending`` (a ``ChatDocument`` from the sender's entity), as the agent's plain
        message (None: no answer)."""
        method = self._custom(f"{entity}_response")
        source = sender if sender in (Entity.LLM, Entity.AGENT, Entity.USER) else Entity.USER
        doc = None if pending is None else chat_document(pending, source, agent=self.agent)
        if inspect.iscoroutinefunction(method):
            answer = await method(doc)
        else:  # a sync responder may block: off the loop
            answer = await asyncio.to_thread(method, doc)
        if answer is None or (isinstance(answer, str) and not answer.strip()):
            return None
        if isinstance(answer, AgentMessage):
            message = plain_message(answer)
            if entity == Entity.AGENT and message.sender != self.agent.name:
                return message  # a tool's result: from the tool that made it
            message = message.model_copy(update={"sender": self.agent.name})
        else:
            message = AgentMessage(sender=self.agent.name, content=str(answer))
        if entity == Entity.LLM:
            return self.agent.parse_call(message) if self.task.tool_loop else message
        info = message.extra_info if isinstance(message.extra_info, dict) else {}
        return message.model_copy(update={"extra_info": {"fallback": True, **info}})

    async def _llm(self, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        if self._custom("llm_response") is not None:  # the program's own llm_response
            self._remember(pending)
            answer = await self._custom_response(Entity.LLM, pending, self.sender)
            self._remember(answer)
            yield "final", answer
            return
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

    def _has_fallback(self) -> bool:
        return self.task.tool_loop and callable(
            getattr(self.agent, "handle_message_fallback", None)
        )

    def _foreign_call(self, message: AgentMessage) -> AgentMessage | None:
        """Another agent's message holding a tool call this task's agent handles (langroid:
        a tool one agent uses and another handles), with this agent's parse of it."""
        if not self.task.tool_loop or not isinstance(message.content, str):
            return None
        copy = self.agent.parse_call(message.model_copy(update={"formatted": None}))
        return copy if self.agent.handles(copy.formatted) else None

    async def _tools(self, pending: AgentMessage | None) -> AsyncGenerator[Step]:
        assert pending is not None
        if self._custom("agent_response") is not None:  # the program's own agent_response
            answer = await self._custom_response(Entity.AGENT, pending, self.sender)
            yield "final", answer
            return
        if self.task.wants_tool(pending) and pending.sender == self.agent.name:
            call: AgentMessage | None = pending
        else:
            call = self._foreign_call(pending)
        if call is None:  # the model answered without a tool: langroid's fallback
            yield "final", self._fallback(pending)
            return
        routed = _recipient_call(call)
        if routed is not None:  # RecipientTool: the content goes to the named recipient
            yield "final", routed.model_copy(update={"sender": self.agent.name})
            return
        if call is not pending:
            self._remember(call)
        result = await self.agent.run_tool(call, self.session_id)
        self._remember(result)
        yield "final", result

    def _fallback(self, pending: AgentMessage) -> AgentMessage | None:
        """langroid's ``handle_message_fallback`` for the model's reply without a tool."""
        message = chat_document(pending, Entity.LLM, self.agent.name, agent=self.agent)
        answer: AgentMessage | None = self.agent.fallback_response(message)
        return answer

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
        stream: Any = sub._stream(*inputs, session_id=self.session_id, caller=self.task)
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
    def _killed(self) -> bool:
        return self.task.killed or self.task.session_killed(self.session_id)

    async def steps(self, initial: AgentMessage | None) -> AsyncIterator[AgentMessage]:
        task = self.task
        pending, sender = initial, None
        caller = self.caller = initial.sender if initial is not None else "user"
        to = initial.receiver if initial is not None else None
        to = None if to == task.name else to
        stalled = 0
        self.mark_memory()
        while True:
            if self._killed():
                yield self._final(StatusCode.KILL, None, caller)
                return
            response, entity, tried = None, None, []
            no_answer: tuple[str, AgentMessage] | None = None  # someone said DO-NOT-KNOW
            self.sender = sender
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
                            if self._killed():
                                break
                    if self._killed():
                        break
                    if response is not None and self.signals and is_no_answer(response):
                        no_answer = no_answer or (name, response)
                        response = None  # not an answer: the next responder may have one
                    if response is not None:
                        entity = name
                        break
            except _Stop as stop:
                yield self._final(stop.status, None, caller)
                return
            if self._killed():
                yield self._final(StatusCode.KILL, None, caller)
                return
            self.turns += 1
            if (response is None or entity is None) and no_answer is not None:
                entity, response = no_answer
            if response is None or entity is None:
                stalled += 1
                status = None
                if any(name in task.done_if_no_response for name in tried):
                    status = StatusCode.DONE
                elif stalled >= task.max_stalled_steps:
                    status = StatusCode.STALLED
                elif self.limit is not None and self.turns >= self.limit:
                    status = self.turns_status
                if status is not None:
                    content = pending.content if status == StatusCode.DONE and pending else None
                    yield self._final(status, content, caller)
                    return
                if task.allow_null_result:  # langroid: a NO_ANSWER from the other side
                    llm_spoke = sender == Entity.LLM
                    sender = Entity.USER if llm_spoke else Entity.LLM
                    who = "user" if llm_spoke else self.agent.name
                    pending, to = AgentMessage(sender=who, content=NO_ANSWER), None
                continue
            routing = self._routing(entity, response) if self.signals else None
            if routing is not None and routing[0] == "pass":  # pending stays; maybe addressed
                stalled += 1
                to = routing[1] or to
                if stalled >= task.max_stalled_steps:
                    yield self._final(StatusCode.STALLED, None, caller)
                    return
                continue
            if routing is not None:  # "send": the content goes to the named responder
                response = response.model_copy(
                    update={"content": routing[2], "receiver": routing[1]}
                )
            stalled = 0
            if entity in task.sub_tasks:
                self.last_sub = entity
            to = response.receiver  # an explicit address (a model's or a handler's choice)
            to_caller = to is not None and self.parent is not None and to == self.parent.name
            addressed = self._addressed(entity, response)
            if id(response) in self.remembered:  # the same message: stored once, not twice
                self.remembered.add(id(addressed))
            response = addressed
            self.history.append((entity, str(response.content)))
            status = StatusCode.DONE if to_caller else self._status_after(entity, response, sender)
            if status is not None:
                yield self._tag(response, status, caller)
                return
            yield response
            pending, sender = response, entity

    @property
    def signals(self) -> bool:
        """Whether langroid's string signals (DONE, PASS, SEND_TO, DO-NOT-KNOW) act."""
        return self.task.config.recognize_string_signals

    def _routing(self, entity: str, message: AgentMessage) -> tuple[str, str | None, str] | None:
        """langroid's ``_parse_routing``: ("pass", recipient or None, "") for ``__PASS__`` /
        ``__PASS__:name``; ("send", name, text) for ``__SEND__:name text`` or the addressing
        prefix (``@name text``); None otherwise (a tool call is never a routing signal)."""
        content = message.content
        if not isinstance(content, str):
            return None
        content = content.strip()
        tool_call = entity == Entity.LLM and self.task.wants_tool(message)
        if tool_call and not content.startswith((PASS, SEND_TO)):
            return None
        if PASS in content and PASS_TO not in content:
            return "pass", None, ""
        if PASS_TO in content and content.split(":")[1] != "":
            return "pass", content.split(":")[1].split()[0], ""
        prefixes = [SEND_TO, self.task.config.addressing_prefix]
        for prefix in prefixes:
            if prefix and prefix in content:
                name, text = parse_addressed(content, prefix)
                if name is not None:
                    return ("pass", name, "") if text == "" else ("send", name, text)
        return None

    def _status_after(
        self, entity: str, response: AgentMessage, previous: str | None = None
    ) -> StatusCode | None:
        task = self.task
        formatted = response.formatted if isinstance(response.formatted, dict) else {}
        if entity == Entity.AGENT and formatted.get("valid") == int(ActionValidCode.FINISH):
            return StatusCode.DONE
        info = response.extra_info if isinstance(response.extra_info, dict) else {}
        if entity == Entity.AGENT and info.get("done"):  # handle_llm_no_tool="done"
            return StatusCode.DONE
        calling = entity == Entity.LLM and task.wants_tool(response)  # not an answer yet
        if task.config.done_if_tool and entity == Entity.LLM and _is_tool_attempt(response):
            return StatusCode.DONE
        if entity in task.done_if_response and not calling:
            return StatusCode.DONE
        if task.single_round and not calling:
            if task.llm_delegate:  # the model leads: done once someone answered it
                if entity != Entity.LLM and previous == Entity.LLM:
                    return StatusCode.DONE
            elif entity != Entity.AGENT:
                return StatusCode.DONE  # the first answer outside a tool exchange
        if task.is_done(response):
            return StatusCode.DONE
        if self.signals and not calling and DONE in str(response.content):
            return StatusCode.DONE
        if task.budget is not None and task.budget.exceeded(self.usage):
            return StatusCode.BUDGET
        limited = self.limits.status(task, self.usage)
        if limited is not None:
            return limited
        if repeating_cycle(self.history, task.loop_repeats, task.max_cycle_len):
            return StatusCode.INF_LOOP
        if self.limit is not None and self.turns >= self.limit:
            return self.turns_status
        return None

    # -- memory ------------------------------------------------------------------------------
    def mark_memory(self) -> None:
        memory = self.agent.memory.get(self.session_id) if self.agent.memory else None
        self.memory_start = len(memory) if memory is not None else 0

    def erase_substeps(self) -> None:
        """langroid's ``erase_substeps``: keep the run's incoming message, the agent's first
        reply and its last message; sub-tasks' agents forget the session."""
        memory = self.agent.memory.get(self.session_id) if self.agent.memory else None
        if memory is not None:
            run = memory.memory[self.memory_start :]
            if len(run) > 3:
                memory.memory[self.memory_start :] = [*run[:2], run[-1]]
        for sub in self.task.sub_tasks.values():
            sub.agent.reset(self.session_id)

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
        prompt, completion = RunLimits.prices(self.task)
        cost = (
            self.usage.prompt_tokens * prompt + self.usage.completion_tokens * completion
        ) / 1000
        info = result_info(self.task.name, status, self.turns, self.usage, cost)
        extra = message.extra_info if isinstance(message.extra_info, dict) else {}
        update: dict[str, Any] = {"extra_info": {**extra, **info}, "receiver": caller}
        content = message.content
        if status == StatusCode.DONE and self.signals and isinstance(content, str):
            if DONE in content:  # langroid's result: the reply without the signal
                update["content"] = content.replace(DONE, "").strip()
        if self.task.erase_substeps:
            self.erase_substeps()
        return message.model_copy(update=update)

    def _final(self, status: StatusCode, content: Any, caller: str) -> AgentMessage:
        message = AgentMessage(sender=self.task.name, content=content or "")
        return self._tag(message, status, caller)


def _is_tool_attempt(message: AgentMessage) -> bool:
    parsed = message.formatted
    return isinstance(parsed, dict) and parsed.get("tool_type") is not None


def _recipient_call(call: AgentMessage) -> AgentMessage | None:
    """A ``RecipientTool`` call as the message it sends (langroid's handler), else None."""
    action = call.formatted.get("action") if isinstance(call.formatted, dict) else None
    if not isinstance(action, dict):
        return None
    params = action.get("parameters", action)
    name = action.get("request", action.get("name"))
    if name != "recipient_message" or not isinstance(params, dict):
        return None
    recipient, content = params.get("intended_recipient"), params.get("content")
    if not isinstance(recipient, str) or not isinstance(content, str):
        return None
    return AgentMessage(sender="", content=content, receiver=recipient)


async def _ask_console(pending: AgentMessage | None) -> str:
    prompt = f"{pending.sender}: {pending.content}\n> " if pending is not None else "> "
    return await asyncio.to_thread(input, prompt)


__all__ = ["QUIT_WORDS", "RunLimits", "TaskRun", "is_no_answer", "parse_addressed"]
