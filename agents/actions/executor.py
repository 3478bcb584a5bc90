"""ActionExecutor / AsyncActionExecutor: route a tool call message to a tool, with hooks.

One implementation (the async ``acall``); the sync executor drives it with ``run_sync``.
``executor(AgentMessage(content={'name': 'Tool.api', 'parameters': {...}}), session_id)``
returns ``AgentMessage(sender=<executor class>, content=ActionReturn)`` and never raises for
a bad call: unknown tools and bad arguments are ``ARGS_ERROR``, tool failures ``API_ERROR``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from typing import Any

from agents import tracing
from agents.actions.approval import (
    PAUSE,
    ApprovalHook,
    ApprovalRequired,
    Decision,
    PendingCall,
    ask,
    denial,
    new_call_id,
)
from agents.actions.base import (
    OPENAI_SEPARATOR,
    BaseAction,
    _parse_arguments,
    current_session_id,
    to_openai_tools,
)
from agents.actions.builtins import FinishAction, InvalidAction, NoAction
from agents.actions.signature import ArgumentError, JsonSchema
from agents.hooks import Hook, RemovableHandle, apply_hooks
from agents.schema import ActionReturn, ActionStatusCode, ActionValidCode, AgentMessage


class _Executor:
    """The shared logic of both executors."""

    def __init__(
        self,
        actions: BaseAction | Iterable[BaseAction] | Any,
        invalid_action: BaseAction | None = None,
        no_action: BaseAction | None = None,
        finish_action: BaseAction | None = None,
        finish_in_action: bool = False,
        hooks: Iterable[Hook] | None = None,
        approval: ApprovalHook | None = None,
    ) -> None:
        from agents.tool_message import as_actions  # ToolMessage classes are tools too

        items = as_actions([actions] if isinstance(actions, BaseAction | type) else list(actions))
        self.finish_action = finish_action or FinishAction()
        if finish_in_action:
            items.append(self.finish_action)
        for action in items:
            if not isinstance(action, BaseAction):
                raise TypeError(f"actions must be BaseAction instances, got {type(action)}")
        self.actions: dict[str, BaseAction] = {a.name: a for a in items}
        self.invalid_action = invalid_action or InvalidAction()
        self.no_action = no_action or NoAction()
        self._hooks: dict[int, Hook] = {}
        for hook in hooks or []:
            self.register_hook(hook)
        #: Asked before every call (``agents.actions.approval``): approve, deny, edit or pause.
        self.approval: ApprovalHook | None = approval

    # -- lagent's container API -------------------------------------------------------------
    def __contains__(self, name: str) -> bool:
        return name in self.actions

    def keys(self) -> list[str]:
        """Registered tool names."""
        return list(self.actions)

    def __setitem__(self, name: str, action: BaseAction) -> None:
        self.actions[action.name] = action

    def __delitem__(self, name: str) -> None:
        del self.actions[name]

    def register_hook(self, hook: Hook) -> RemovableHandle:
        """Add a hook (its ``before_action`` / ``after_action``); ``handle.remove()`` drops it."""
        handle = RemovableHandle(self._hooks)
        self._hooks[handle.id] = hook
        return handle

    def description(self) -> list[dict[str, Any]]:
        """lagent's flat list of API descriptions (toolkit APIs named ``Tool.api``)."""
        descs: list[dict[str, Any]] = []
        for name, action in self.actions.items():
            if action.is_toolkit:
                for api in action.description["api_list"]:
                    descs.append({**api, "name": f"{name}.{api['name']}"})
            else:
                descs.append(dict(action.description))
        return descs

    def tool_schemas(self, separator: str = OPENAI_SEPARATOR) -> list[JsonSchema]:
        """OpenAI ``tools`` entries for every registered tool."""
        return to_openai_tools(self.actions.values(), separator)

    async def aprepare(self, session_id: str | int = 0) -> None:
        """Let tools that learn their APIs at run time (MCP servers) list them, concurrently."""
        prepares = [
            prepare(session_id)
            for action in self.actions.values()
            if (prepare := getattr(action, "aprepare", None)) is not None
        ]
        if prepares:
            await asyncio.gather(*prepares)

    # -- the call ---------------------------------------------------------------------------
    def resolve(self, name: str) -> tuple[BaseAction, str] | None:
        """(tool, api) for ``Tool``, ``Tool.api`` or ``Tool__api``; None when unknown."""
        if name in self.actions and not self.actions[name].is_toolkit:
            return self.actions[name], "run"
        for sep in (".", OPENAI_SEPARATOR):
            tool, found, api = name.partition(sep)
            if found and tool in self.actions:
                return self.actions[tool], api
        return None

    async def aforward(self, name: str, parameters: Any, **kwargs: Any) -> ActionReturn:
        """Run one call by name; the result's ``valid`` says whether the tool existed."""
        target = self.resolve(name)
        if target is None:
            if name == self.no_action.name:
                return await self.no_action.acall(parameters)
            if name == self.finish_action.name:
                return await self.finish_action.acall(parameters)
            known = ", ".join(self._api_names()) or "none"
            msg = f"unknown tool '{name}'; available tools: {known}"
            return await self.invalid_action.acall({"err_msg": msg})
        action, api = target
        result = await action.acall(parameters, api)
        if result.valid is None:  # a tool's own FINISH / INVALID stands
            result.valid = ActionValidCode.OPEN
        return result

    def _api_names(self) -> list[str]:
        return [
            f"{name}.{api}" if action.is_toolkit else name
            for name, action in self.actions.items()
            for api in action.api_names()
        ]

    # -- approval ---------------------------------------------------------------------------
    async def review(self, call: PendingCall, session_id: str | int = 0) -> Decision | str:
        """What the approval hook says about ``call``: a ``Decision`` or ``PAUSE``."""
        return await ask(self.approval, call, session_id)

    def check_arguments(self, name: str, arguments: Any) -> dict[str, Any]:
        """``arguments`` checked against the tool's schema (a tool or API whose schema is not
        known here, as an MCP server's, passes as is); raises ``ArgumentError`` whose
        ``fields`` name the arguments at fault."""
        target = self.resolve(name)
        spec = target[0].__tool_apis__.get(target[1]) if target is not None else None
        if spec is None:
            return dict(arguments) if isinstance(arguments, dict) else {"input": arguments}
        return spec.validate(_parse_arguments(arguments, spec, name), name)

    def reviewable(self, call: PendingCall) -> bool:
        """Whether ``call`` is one a person should decide about: False for an unknown tool or
        arguments the tool's schema rejects (nothing would run; the model reads the error)."""
        if self.resolve(call.name) is None:
            return False
        try:
            self.check_arguments(call.name, call.arguments)
        except ArgumentError:
            return False
        return True

    async def run_decided(
        self, call: PendingCall, decision: Decision, session_id: str | int = 0
    ) -> AgentMessage:
        """Carry out a person's decision about ``call``: run it (approve), run it with the new
        arguments (edit) or answer with the denial (deny), without asking the hook again."""
        if decision.action == "deny":
            response = AgentMessage(
                sender=type(self).__name__, content=denial(call, decision.message)
            )
            return await self._run_hooks("after_action", response, session_id)
        arguments = decision.arguments if decision.action == "edit" else call.arguments
        content = {"name": call.name, "parameters": arguments}
        message = AgentMessage(sender="user", content=content, formatted={"tool_call_id": call.id})
        return await self.acall(message, session_id, decision=Decision.approve())

    async def acall(
        self,
        message: AgentMessage,
        session_id: str | int = 0,
        decision: Decision | None = None,
        **kwargs: Any,
    ) -> AgentMessage:
        """Hooks, the approval hook (unless ``decision`` is given), then the call with
        ``current_session_id`` set, then hooks. A hook that says ``PAUSE`` raises
        ``ApprovalRequired`` (a tool agent asks ``review`` first and stops instead)."""
        message = await self._run_hooks("before_action", message, session_id)
        token = current_session_id.set(session_id)
        try:
            name, parameters, problem = _unpack(message.content)
            if not problem and decision is None and self.approval is not None:
                call = PendingCall(new_call_id(), name, dict(parameters or {}))
                answer = await self.review(call, session_id)
                if answer == PAUSE:
                    raise ApprovalRequired([call])
                decision = answer if isinstance(answer, Decision) else Decision.approve()
                if decision.action == "deny":
                    result = denial(call, decision.message)
                    response = AgentMessage(sender=type(self).__name__, content=result)
                    return await self._run_hooks("after_action", response, session_id)
                if decision.action == "edit":
                    parameters = decision.arguments
            if problem:
                result = ActionReturn(
                    args={"content": message.content}, errmsg=problem,
                    state=ActionStatusCode.ARGS_ERROR, valid=ActionValidCode.INVALID,
                )  # fmt: skip
            else:
                tracer = tracing.TRACER  # a hook point (agents/tracing.py: execute_tool)
                if tracer is None:
                    result = await self.aforward(name, parameters, **kwargs)
                else:
                    call_id = _call_id(message)
                    result = await tracer.tool(
                        name, parameters, call_id, lambda: self.aforward(name, parameters, **kwargs)
                    )
        finally:
            current_session_id.reset(token)
        response = AgentMessage(sender=type(self).__name__, content=result)
        return await self._run_hooks("after_action", response, session_id)

    async def _run_hooks(self, stage: str, message: AgentMessage, session_id: Any) -> AgentMessage:
        result: AgentMessage = await apply_hooks(
            list(self._hooks.values()), stage, self, message, session_id
        )
        return result


def _call_id(message: AgentMessage) -> str | None:
    """The model's id of a tool call, when it gave one (native tool calls)."""
    formatted = message.formatted
    call_id = formatted.get("tool_call_id") if isinstance(formatted, dict) else None
    return call_id if isinstance(call_id, str) else None


def _unpack(content: Any) -> tuple[str, Any, str | None]:
    """(name, parameters, problem) from a dict or a FunctionCall-like object."""
    if isinstance(content, dict):
        name, parameters = content.get("name"), content.get("parameters", {})
    else:
        name, parameters = getattr(content, "name", None), getattr(content, "parameters", {})
    if not isinstance(name, str) or not name:
        got = repr(content)[:200]
        return "", None, f"a tool call needs {{'name': str, 'parameters': dict}}, got {got}"
    return name, parameters, None


class AsyncActionExecutor(_Executor):
    """Async executor: ``await executor(message, session_id=0)``."""

    async def __call__(
        self, message: AgentMessage, session_id: str | int = 0, **kwargs: Any
    ) -> AgentMessage:
        return await self.acall(message, session_id, **kwargs)

    async def forward(self, name: str, parameters: Any, **kwargs: Any) -> ActionReturn:
        """Run one call by name, without hooks (lagent's ``forward``)."""
        return await self.aforward(name, parameters, **kwargs)


class ActionExecutor(_Executor):
    """Sync executor: ``executor(message, session_id=0)`` (drives the async core)."""

    def __call__(
        self, message: AgentMessage, session_id: str | int = 0, **kwargs: Any
    ) -> AgentMessage:
        from agents.utils import run_sync

        return run_sync(self.acall(message, session_id, **kwargs))

    def forward(self, name: str, parameters: Any, **kwargs: Any) -> ActionReturn:
        """Run one call by name, without hooks (lagent's ``forward``)."""
        from agents.utils import run_sync

        return run_sync(self.aforward(name, parameters, **kwargs))
