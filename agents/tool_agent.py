"""Tool-using agents: the lagent README's "Coder" loop as a reusable, streaming class.

model → parser → executor → model, until a reply has no tool call or ``max_turn`` model
turns were made. Every phase streams, in lagent's order: the model's text as ``STREAM_ING``
chunks; once the call's begin marker is written, the call in progress as ``PLUGIN_START`` (JSON
call) or ``CODING`` (code) chunks; the complete call as ``PLUGIN_END`` / ``CODE_END``; its result
as ``PLUGIN_RETURN`` / ``CODE_RETURN``; and the final answer as ``END``. Calls and results are
stored in memory (with state END), so the next model turn sees them. Nothing the model writes
makes it raise.

One module on purpose: the loop's phases (model, parser, executor, the pause before a call
that needs approval and its resume) share the loop's state, and langroid's responders
(``llm_response``, ``agent_response``, ``handle_message_fallback``) are entry points into the
same phases.
"""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, TypeGuard

from agents import tracing
from agents.actions.approval import (
    PAUSE,
    Decision,
    PendingApproval,
    PendingCall,
    as_decisions,
    new_call_id,
)
from agents.agent import Agent, AsyncAgent, BaseAgent
from agents.aggregator import DefaultAggregator, SystemInstruction, ToolAggregator
from agents.chat_document import ChatDocument, chat_document, plain_message, sender_entity
from agents.hooks import Hook, action_return_text, tool_call
from agents.langroid_tools import LangroidTools, user_method
from agents.llms.base import AsyncBaseLLM
from agents.memory import Memory, MemorySpec, SessionId
from agents.native import NativeToolFormat
from agents.parsers import MixedToolParser, ToolParser
from agents.schema import (
    ActionReturn,
    ActionStatusCode,
    ActionValidCode,
    AgentMessage,
    AgentStatusCode,
)
from agents.task_types import Entity
from agents.tool_message import DoneTool, ToolMessage, ToolMessageAction

_STREAM_ING = AgentStatusCode.STREAM_ING
_END = AgentStatusCode.END
_CALL_STARTS = (AgentStatusCode.PLUGIN_START, AgentStatusCode.CODING)


def default_tool_parser() -> ToolParser:
    """A JSON tool call in a ```json fence: ``{"name": ..., "parameters": {...}}``."""
    return ToolParser("plugin", begin="```json\n", end="\n```\n", validate="json")


class _ToolLoop(BaseAgent):
    """The loop shared by ``ToolAgent`` and ``AsyncToolAgent``."""

    def __init__(
        self,
        llm: AsyncBaseLLM | None = None,
        template: SystemInstruction | None = None,
        executor: Any = None,
        output_format: ToolParser | MixedToolParser | NativeToolFormat | None = None,
        aggregator: DefaultAggregator | None = None,
        max_turn: int = 5,
        memory: MemorySpec | None = Memory,
        name: str | None = None,
        description: str | None = None,
        hooks: Iterable[Hook] | Hook | None = None,
        code_parameter: str = "command",
        handle_llm_no_tool: Any = None,
    ) -> None:
        super().__init__(
            llm=llm,
            template=template,
            memory=memory,
            output_format=output_format if output_format is not None else default_tool_parser(),
            aggregator=aggregator if aggregator is not None else ToolAggregator(),
            name=name,
            description=description,
            hooks=hooks,
        )
        if isinstance(executor, list | tuple):
            from agents.actions.executor import AsyncActionExecutor

            executor = AsyncActionExecutor(list(executor))
        self.executor = executor
        self.max_turn = max_turn
        self.code_parameter = code_parameter
        #: langroid: a reply without a tool call (in a Task) gets this answer from the agent:
        #: a string (a reminder), a callable of the message, or "done" (the task ends with it).
        self.handle_llm_no_tool = handle_llm_no_tool
        self.langroid_tools = LangroidTools()
        for action in getattr(executor, "actions", {}).values():
            if isinstance(action, ToolMessageAction):
                self.langroid_tools.add(action.tool)
                if action.handler is None:
                    action.handler = self._method_handler(action.tool.name())
        #: Calls waiting for a person, per session (the executor's approval hook said PAUSE).
        self.pending: dict[SessionId, PendingApproval] = {}

    async def forward(
        self, *message: AgentMessage, session_id: SessionId = 0, **kwargs: Any
    ) -> Any:
        """Model turns and tool calls until an answer; yields every phase."""
        async for chunk in self._loop(message, session_id, 0, kwargs):
            yield chunk

    async def _loop(
        self,
        message: tuple[AgentMessage, ...],
        session_id: SessionId,
        start: int,
        kwargs: dict[str, Any],
    ) -> AsyncIterator[AgentMessage]:
        """Turns ``start``.. of the loop. A call the approval hook pauses ends it: the reply
        (the call) is the turn's answer and ``self.pending[session_id]`` says what waits."""
        for turn in range(start, self.max_turn):
            reply: AgentMessage | None = None
            started = False  # a chunk of the call in progress was streamed
            async for chunk in self.model_turn(message, session_id, **kwargs):
                if chunk.stream_state == _END:
                    reply = chunk
                else:
                    started = started or chunk.stream_state in _CALL_STARTS
                    yield chunk
            assert reply is not None
            parsed = reply.formatted
            if turn == self.max_turn - 1 or not self.handles(parsed) or not _is_call(parsed):
                yield reply  # the answer (or the last word when turns run out)
                return
            code = parsed["status"] == 1 and isinstance(parsed["action"], str)
            decision: Decision | None = None
            call = self.pending_call(reply)
            reviewable = getattr(self.executor, "reviewable", None)
            if call is not None and reviewable is not None and not reviewable(call):
                # Nothing would run (an unknown tool, arguments its schema rejects): the model
                # reads the error now, no person is asked.
                decision = Decision.approve()
            elif call is not None:
                answer = await self.executor.review(call, session_id)
                if answer == PAUSE:
                    self.pending[session_id] = PendingApproval([call], turn, code)
                    yield reply  # the call is this turn's answer until a person decides
                    return
                decision = answer if isinstance(answer, Decision) else None
            self.update_memory(reply, session_id=session_id)
            if not started:  # a call without markers (native, bare JSON): still lagent's order
                state = AgentStatusCode.CODING if code else AgentStatusCode.PLUGIN_START
                yield reply.model_copy(update={"stream_state": state}, deep=True)
            state = AgentStatusCode.CODE_END if code else AgentStatusCode.PLUGIN_END
            yield reply.model_copy(update={"stream_state": state}, deep=True)
            if decision is not None and call is not None:
                result = await self._decided(call, decision, session_id)
            else:
                result = await self.run_tool(reply, session_id)
            self.update_memory(result, session_id=session_id)
            state = AgentStatusCode.CODE_RETURN if code else AgentStatusCode.PLUGIN_RETURN
            yield result.model_copy(update={"stream_state": state}, deep=True)

    # -- approval ---------------------------------------------------------------------------
    def pending_call(self, reply: AgentMessage) -> PendingCall | None:
        """The call of a well-formed tool-call ``reply``, when the executor has an approval
        hook to ask about it (None otherwise)."""
        parsed = reply.formatted
        if (
            not _is_call(parsed)
            or parsed["status"] != 1
            or getattr(self.executor, "approval", None) is None
            or not callable(getattr(self.executor, "review", None))
        ):
            return None
        content = tool_call(self.executor, parsed, self.code_parameter)
        if not isinstance(content, dict) or not isinstance(content.get("name"), str):
            return None
        params = content.get("parameters")
        arguments = params if isinstance(params, dict) else {"input": params}
        call_id = parsed.get("tool_call_id") or new_call_id()
        return PendingCall(call_id, content["name"], dict(arguments))

    def check_decisions(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId = 0,
        pending: PendingApproval | None = None,
    ) -> dict[str, Decision]:
        """One valid decision per waiting call, edited arguments checked against the tool's
        schema; raises ``ValueError`` (``ArgumentError`` with ``fields`` for a bad edit)."""
        waiting = pending if pending is not None else self.pending.get(session_id)
        if waiting is None:
            raise ValueError("no tool call of this session waits for approval")
        chosen = as_decisions(decisions)
        ids = [c.id for c in waiting.calls]
        unknown = sorted(set(chosen) - set(ids))
        if unknown:
            raise ValueError(f"no pending tool call has id {unknown[0]!r} (pending: {ids})")
        missing = [i for i in ids if i not in chosen]
        if missing:
            raise ValueError(f"a decision is needed for every pending call; missing {missing}")
        check = getattr(self.executor, "check_arguments", None)
        for call in waiting.calls:
            decision = chosen[call.id]
            if decision.action == "edit" and check is not None:
                check(call.name, decision.arguments)  # raises ArgumentError naming the fields
        return chosen

    async def _decided(
        self, call: PendingCall, decision: Decision, session_id: SessionId
    ) -> AgentMessage:
        """The result message of a decided call (run, run edited, or denied)."""
        sender = type(self.executor).__name__
        try:
            out = await self.executor.run_decided(call, decision, session_id)
        except Exception as exc:  # a broken tool is the model's problem to read, not a crash
            return _result(sender, _error(call.to_dict(), f"{type(exc).__name__}: {exc}"))
        return _result(out.sender, out.content)

    async def _resume(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId,
        pending: PendingApproval | None,
        kwargs: dict[str, Any],
    ) -> AsyncIterator[AgentMessage]:
        """The decided calls' results, then the loop's next turns; like a turn's stream."""
        waiting = pending if pending is not None else self.pending.get(session_id)
        chosen = self.check_decisions(decisions, session_id, waiting)
        assert waiting is not None
        self.pending.pop(session_id, None)

        async def chunks() -> AsyncIterator[AgentMessage]:
            state = AgentStatusCode.CODE_RETURN if waiting.code else AgentStatusCode.PLUGIN_RETURN
            for call in waiting.calls:
                result = await self._decided(call, chosen[call.id], session_id)
                self.update_memory(result, session_id=session_id)
                yield result.model_copy(update={"stream_state": state}, deep=True)
            async for chunk in self._loop((), session_id, waiting.turn + 1, kwargs):
                yield chunk

        async for chunk in self._continue(chunks(), session_id):
            yield chunk

    async def model_turn(
        self, message: tuple[AgentMessage, ...], session_id: SessionId, **kwargs: Any
    ) -> AsyncIterator[AgentMessage]:
        """One model call on the session's memory: STREAM_ING chunks, then the parsed reply."""
        prepare = getattr(self.executor, "aprepare", None)
        if prepare is not None:  # tools that list their APIs at run time (MCP servers)
            await prepare(session_id)
        llm_kwargs = getattr(self.output_format, "llm_kwargs", None)
        if llm_kwargs is not None:  # native tool calls: the tools go with every model call
            kwargs = {**self._native_kwargs(llm_kwargs(self.executor)), **kwargs}
        async for chunk in self._generate(message, session_id, **kwargs):
            if chunk.stream_state == _STREAM_ING and isinstance(chunk.content, str):
                state = call_start_state(self.output_format, chunk.content)
                if state is not None:  # the call is being written (lagent's stream states)
                    chunk.stream_state = state
            elif chunk.stream_state == _END:
                self._recognize(chunk)
            yield chunk

    # -- langroid's tools -------------------------------------------------------------------
    def system_instruction(self) -> SystemInstruction | None:
        """The agent's system prompt, then what langroid tells the model about its usable
        ``ToolMessage`` tools (descriptions, JSON Schemas, examples; see agents.langroid_tools)."""
        native = getattr(self.output_format, "accepts_tool_calls", False)
        extra = self.langroid_tools.system_message(native=native)
        template = self.template
        if not extra:
            return template
        if not template:
            return extra
        if isinstance(template, str):
            return template + "\n\n" + extra
        items = [template] if isinstance(template, dict) else list(template)
        return [*items, {"role": "system", "content": extra}]

    def _native_kwargs(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        tools = self.langroid_tools
        if not tools.llm_tools_map:
            return kwargs
        kwargs = {**kwargs, "tools": tools.native_tools(list(kwargs.get("tools") or []))}
        if not kwargs["tools"]:
            kwargs.pop("tools")
            kwargs.pop("tool_choice", None)
        elif tools.force is not None:
            kwargs["tool_choice"] = {"type": "function", "function": {"name": tools.force}}
        return kwargs

    def _recognize(self, reply: AgentMessage) -> None:
        """A reply without a call in the agent's format may hold langroid's bare JSON call
        (``{"request": ...}``, ``TOOL:`` before it or not): it becomes the reply's call."""
        parsed = reply.formatted
        if not self.langroid_tools.llm_tools_map or not isinstance(reply.content, str):
            return
        if parsed is not None and not (isinstance(parsed, dict) and parsed.get("status") == 0):
            return
        found = self.langroid_tools.recognize(reply.content)
        if found is None:
            return
        thought, call = found
        tool_type = getattr(self.output_format, "tool_type", None) or "plugin"
        reply.formatted = {"tool_type": tool_type, "thought": thought, "action": call, "status": 1}

    def handles(self, parsed: Any) -> bool:
        """Whether a parsed call names a tool this agent runs (a ``ToolMessage`` it knows but
        does not handle is another agent's to answer)."""
        if not _is_call(parsed):
            return False
        name = _call_name(parsed)
        tools = self.langroid_tools
        return not (name in tools.llm_tools_map and name not in tools.llm_tools_handled)

    def handle_message_fallback(self, message: AgentMessage) -> Any:
        """langroid's fallback for a message with no tool this agent handles, given as a
        ``ChatDocument`` (``message.metadata.sender``: who sent it): None (no answer; in a task
        the next responder goes), a string or message (the agent's answer), a ``DoneTool`` or
        ``"done"`` (the task ends with it). Default, as langroid's: ``handle_llm_no_tool`` for
        the model's replies, None for anything else."""
        option = self.handle_llm_no_tool
        if option is None or sender_entity(message, self.name) != Entity.LLM:
            return None
        return option(message) if callable(option) else option

    def fallback_response(self, message: AgentMessage) -> AgentMessage | None:
        """``handle_message_fallback``'s answer to ``message`` as the agent's message: None,
        one marked ``extra_info["fallback"]`` (the model reads it as a user turn), or one
        marked ``extra_info["done"]`` (``"done"`` / a ``DoneTool``: a task ends with it)."""
        entity = sender_entity(message, self.name)
        answer = self.handle_message_fallback(chat_document(message, entity, agent=self))
        if answer is None:
            return None
        done = {"done": True}
        if isinstance(answer, str) and answer == "done":  # langroid's NonToolAction.DONE
            return plain_message(message).model_copy(update={"extra_info": done})
        if isinstance(answer, DoneTool):  # langroid: a fallback may end the task with a result
            return AgentMessage(sender=self.name, content=answer.content, extra_info=done)
        if isinstance(answer, AgentMessage):
            reply = plain_message(answer)
        elif isinstance(answer, ToolMessage):  # a call for another agent to handle
            reply = AgentMessage(sender=self.name, content=answer.to_json())
        else:
            reply = AgentMessage(sender=self.name, content=str(answer))
        return reply.model_copy(update={"extra_info": {"fallback": True}})

    def parse_call(self, message: AgentMessage) -> AgentMessage:
        """A copy of ``message`` with its tool call (in the agent's format or langroid's JSON)
        in ``formatted``: what the agent's parser makes of another's text."""
        parsed = message.formatted
        if not _is_call(parsed) and isinstance(message.content, str):
            parse = getattr(self.output_format, "parse_response", None)
            parsed = parse(message.content) if parse is not None else None
        copy = plain_message(message).model_copy(update={"formatted": parsed})
        self._recognize(copy)
        return copy

    # -- langroid's responders, called directly ---------------------------------------------
    async def llm_response_async(
        self, message: AgentMessage | str | None = None, session_id: SessionId = 0, **kwargs: Any
    ) -> ChatDocument:
        """langroid's ``llm_response``: one model call on the session's history and
        ``message`` (both kept in memory); the reply as a ``ChatDocument`` from the model,
        its ``ToolMessage`` call (if any) in ``tool_messages``."""
        inputs: tuple[AgentMessage, ...] = ()
        if message is not None:
            inputs = (_as_input(message),)
            self.update_memory(list(inputs), session_id=session_id)
        reply: AgentMessage | None = None
        async for chunk in self.model_turn(inputs, session_id, **kwargs):
            if chunk.stream_state == _END:
                reply = chunk
        assert reply is not None
        self.update_memory(reply, session_id=session_id)
        return chat_document(reply, Entity.LLM, self.name, agent=self)

    def llm_response(
        self, message: AgentMessage | str | None = None, session_id: SessionId = 0, **kwargs: Any
    ) -> ChatDocument:
        """``llm_response_async`` from sync code."""
        from agents.utils import run_sync

        return run_sync(self.llm_response_async(message, session_id, **kwargs))

    async def agent_response_async(
        self, message: AgentMessage | str | None = None, session_id: SessionId = 0
    ) -> ChatDocument | None:
        """langroid's ``agent_response``: the result of the tool call ``message`` holds (a
        tool this agent handles), else ``handle_message_fallback``'s answer; None when there
        is neither. As langroid, a message from the user (a string, or a ``ChatDocument``
        whose ``metadata.sender`` is the user) runs only tools the model may use."""
        if message is None:
            return None
        entity = sender_entity(message, self.name)
        call = self.parse_call(_as_input(message))
        name = _call_name(call.formatted)
        tools = self.langroid_tools
        hidden = name in tools.llm_tools_map and name not in tools.llm_tools_usable
        if entity == Entity.USER and hidden:  # langroid's GHSA-gjgq-w2m6-wr5q rule
            call = call.model_copy(update={"formatted": None})
        if not _is_call(call.formatted) or not self.handles(call.formatted):
            answer = self.fallback_response(chat_document(message, entity, agent=self))
            return None if answer is None else chat_document(answer, Entity.AGENT, self.name)
        result = await self.run_tool(call, session_id)
        return chat_document(result, Entity.AGENT, self.name)

    def agent_response(
        self, message: AgentMessage | str | None = None, session_id: SessionId = 0
    ) -> ChatDocument | None:
        """``agent_response_async`` from sync code."""
        from agents.utils import run_sync

        return run_sync(self.agent_response_async(message, session_id))

    def create_llm_response(self, content: str | None = None, **fields: Any) -> ChatDocument:
        """langroid's ``create_llm_response``: a ``ChatDocument`` from this agent's model."""
        return chat_document(AgentMessage(sender=self.name, content=content or "", **fields),
                             Entity.LLM, self.name)  # fmt: skip

    def create_agent_response(self, content: str | None = None, **fields: Any) -> ChatDocument:
        """langroid's ``create_agent_response``: a ``ChatDocument`` from this agent itself."""
        return chat_document(AgentMessage(sender=self.name, content=content or "", **fields),
                             Entity.AGENT, self.name)  # fmt: skip

    def wants_tool(self, reply: AgentMessage) -> bool:
        """Whether ``reply`` (a model turn's) is a tool call this agent answers, well-formed
        or not."""
        return self.handles(reply.formatted)

    def enable_message(
        self,
        message_class: Any = None,
        use: bool = True,
        handle: bool = True,
        force: bool = False,
        require_recipient: bool = False,
        include_defaults: bool = True,
    ) -> None:
        """langroid's ``enable_message``: a ``ToolMessage`` class (or a list of them; None: every
        known one) that the model may ``use`` (it is described to it) and the agent will
        ``handle`` (run). ``force``: the model must call it (native tool calls);
        ``require_recipient``: calls must name a ``recipient``. ``BaseAction`` objects are
        added as tools as they are."""
        if isinstance(message_class, list | tuple):
            for item in message_class:
                self.enable_message(item, use, handle, force, require_recipient, include_defaults)
            return
        if isinstance(use, type) or isinstance(handle, type):
            raise TypeError("pass several tools as a list: enable_message([Tool1, Tool2])")
        if message_class is None:
            for tool in list(self.langroid_tools.llm_tools_map.values()):
                self.enable_message(tool, use, handle, False, False, include_defaults)
            return
        if isinstance(message_class, type) and issubclass(message_class, ToolMessage):
            tool = message_class.require_recipient() if require_recipient else message_class
            self.langroid_tools.add(tool, use, handle, force, include_defaults)
            if handle:
                self._add_actions([ToolMessageAction(tool, self._method_handler(tool.name()))])
            elif self.executor is not None and tool.name() in self.executor:
                del self.executor[tool.name()]
            return
        self._add_actions([message_class])

    def _method_handler(self, request: str) -> Any:
        """langroid's handler on the agent: a method named after the tool's ``request``,
        defined by the agent's own class (never one of the library's methods)."""
        return user_method(self, request)

    def disable_message_handling(self, message_class: type[ToolMessage] | None = None) -> None:
        """The agent stops running this tool (every known one: None); the model may still use it."""
        tools = self.langroid_tools
        known = [message_class] if message_class is not None else tools.llm_tools_map.values()
        for tool in list(known):
            use = tool.name() in tools.llm_tools_usable
            self.enable_message(tool, use=use, handle=False)

    def disable_message_use(self, message_class: type[ToolMessage] | None = None) -> None:
        """The model is no longer told about this tool (every known one: None)."""
        tools = self.langroid_tools
        known = [message_class] if message_class is not None else tools.llm_tools_map.values()
        for tool in list(known):
            self.enable_message(tool, use=False, handle=tool.name() in tools.llm_tools_handled)

    def _add_actions(self, actions: list[Any]) -> None:
        from agents.actions.executor import AsyncActionExecutor

        if self.executor is None:
            self.executor = AsyncActionExecutor(actions)
            return
        for action in actions:
            self.executor[action.name] = action

    async def run_tool(self, reply: AgentMessage, session_id: SessionId) -> AgentMessage:
        """The tool result message for a call (or for a call that failed to parse)."""
        parsed: dict[str, Any] = reply.formatted or {}
        sender = type(self.executor).__name__ if self.executor is not None else "ActionExecutor"
        if parsed["status"] != 1:
            explain = getattr(self.output_format, "explain_error", None)
            errmsg = explain(parsed) if explain else "Could not parse the tool call."
            return _result(sender, _error(parsed["action"], errmsg, ActionValidCode.INVALID))
        if self.executor is None:
            return _result(sender, _error(parsed["action"], "No tools are available."))
        call = AgentMessage(
            sender=self.name,
            content=tool_call(self.executor, parsed, self.code_parameter),
            formatted=parsed,
        )
        try:
            run = getattr(self.executor, "acall", None) or self.executor
            out = run(call, session_id)
            if inspect.isawaitable(out):
                out = await out
        except Exception as exc:  # a broken tool is the model's problem to read, not a crash
            return _result(sender, _error(call.content, f"{type(exc).__name__}: {exc}"))
        if not isinstance(out, AgentMessage):
            out = AgentMessage(sender=sender, content=out)
        return _result(out.sender, out.content)


def call_start_state(output_format: Any, text: str) -> AgentStatusCode | None:
    """``CODING`` / ``PLUGIN_START`` once ``text`` holds the begin marker of a tool call of
    ``output_format`` (a code call: its parser keeps the action as text), else None."""
    parsers = getattr(output_format, "parsers", None)
    candidates = list(parsers.values()) if isinstance(parsers, dict) else [output_format]
    found = [
        (text.find(p.begin), p)
        for p in candidates
        if isinstance(getattr(p, "begin", None), str) and p.begin and p.begin in text
    ]
    if not found:
        return None
    parser = min(found, key=lambda item: item[0])[1]
    if getattr(parser, "validate", None) is None:
        return AgentStatusCode.CODING
    return AgentStatusCode.PLUGIN_START


def _as_input(message: AgentMessage | str) -> AgentMessage:
    """An input as a plain message (a string: from the user)."""
    if isinstance(message, str):
        return AgentMessage(sender="user", content=message)
    return plain_message(message)


def _call_name(parsed: Any) -> str | None:
    """The tool a parsed call names (None: not a call)."""
    action = parsed.get("action") if _is_call(parsed) else None
    if not isinstance(action, dict):
        return None
    name = action.get("request", action.get("name"))
    return name if isinstance(name, str) else None


def _is_call(parsed: Any) -> TypeGuard[dict[str, Any]]:
    return (
        isinstance(parsed, dict)
        and parsed.get("tool_type") is not None
        and parsed.get("status") in (1, -1)
    )


def _error(args: Any, errmsg: str, valid: ActionValidCode | None = None) -> ActionReturn:
    return ActionReturn(
        args=args if isinstance(args, dict) else {"action": args},
        errmsg=errmsg,
        state=ActionStatusCode.ARGS_ERROR,
        valid=valid or ActionValidCode.OPEN,
    )


def _result(sender: str, content: Any) -> AgentMessage:
    """A tool result: text for the model in ``content``, the ``ActionReturn`` in ``formatted``."""
    if isinstance(content, ActionReturn):
        return AgentMessage(
            sender=sender, content=action_return_text(content), formatted=content.to_dict()
        )
    return AgentMessage(sender=sender, content=content)


class AsyncToolAgent(_ToolLoop, AsyncAgent):
    """Async tool agent: ``await agent(msg, session_id=...)`` / ``agent.stream(...)``."""

    async def resume(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId = 0,
        pending: PendingApproval | None = None,
        **kwargs: Any,
    ) -> AgentMessage:
        """Continue a paused turn with a decision per pending call; returns the reply."""
        reply: AgentMessage | None = None
        async for chunk in self._resume(decisions, session_id, pending, kwargs):
            reply = chunk
        assert reply is not None
        return reply

    def resume_stream(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId = 0,
        pending: PendingApproval | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[AgentMessage]:
        """``resume`` as a stream of chunks, like ``stream`` (and traced like it)."""
        stream = self._resume(decisions, session_id, pending, kwargs)
        tracer = tracing.TRACER  # a hook point (agents/tracing.py: invoke_agent)
        return stream if tracer is None else tracer.agent(self, session_id, stream)


class ToolAgent(_ToolLoop, Agent):
    """Sync tool agent: the same loop driven from sync code."""

    def resume(
        self,
        decisions: Mapping[str, Any] | Iterable[Any],
        session_id: SessionId = 0,
        pending: PendingApproval | None = None,
        **kwargs: Any,
    ) -> AgentMessage:
        """Continue a paused turn with a decision per pending call; returns the reply."""
        from agents.utils import run_sync

        async def collect() -> AgentMessage:
            reply: AgentMessage | None = None
            async for chunk in self._resume(decisions, session_id, pending, kwargs):
                reply = chunk
            assert reply is not None
            return reply

        return run_sync(collect())


__all__ = ["AsyncToolAgent", "ToolAgent", "default_tool_parser"]
