"""Hooks around agents and action executors (lagent's ``Hook`` and ``InternLMActionProcessor``).

A hook method may be a plain function or a coroutine function. It may change the message in
place and return None, or return a replacement.
"""

from __future__ import annotations

import copy
import inspect
from collections.abc import Iterable, MutableMapping
from itertools import count
from typing import Any, ClassVar

from agents.schema import ActionReturn, ActionStatusCode, AgentMessage


class Hook:
    """Base hook: override any of the four stages."""

    def before_agent(self, agent: Any, messages: list[AgentMessage], session_id: Any) -> Any:
        """Called with the (copied) input messages before they reach memory and ``forward``."""
        return None

    def after_agent(self, agent: Any, message: AgentMessage, session_id: Any) -> Any:
        """Called with a copy of the agent's reply, after it was stored in memory."""
        return None

    def before_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        """Called with the tool-call message before the executor runs it."""
        return None

    def after_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        """Called with the executor's result message."""
        return None


class RemovableHandle:
    """Returned by ``register_hook``; ``remove()`` unregisters the hook."""

    _id_iter: ClassVar[count[int]] = count(0)

    def __init__(self, hooks_dict: MutableMapping[int, Any]) -> None:
        self.hooks_dict = hooks_dict
        self.id = next(self._id_iter)

    def remove(self) -> None:
        """Unregister the hook (idempotent)."""
        self.hooks_dict.pop(self.id, None)


async def apply_hooks(
    hooks: Iterable[Hook], stage: str, owner: Any, message: Any, session_id: Any
) -> Any:
    """Run ``stage`` of every hook in order; a non-None result replaces the message."""
    for hook in hooks:
        result = getattr(hook, stage)(owner, message, session_id)
        if inspect.isawaitable(result):
            result = await result
        if result is not None:
            message = result
    return message


def action_return_text(action_return: ActionReturn) -> str:
    """What a model should read for a tool result: the output, or the error."""
    if action_return.state == ActionStatusCode.SUCCESS:
        return action_return.format_result()
    return (
        action_return.errmsg
        or action_return.format_result()
        or (f"tool call failed (state {int(action_return.state)})")
    )


def tool_call(executor: Any, parsed: dict[str, Any], code_parameter: str = "command") -> Any:
    """The executor's ``{'name', 'parameters'}`` for a parsed reply (``ToolParser`` output).

    A code string goes to the executor's first tool as ``{code_parameter: code}`` (lagent's
    InternLMActionProcessor); a failed parse becomes a text the executor rejects as ARGS_ERROR.
    """
    action = parsed.get("action")
    if parsed.get("status") == -1:
        return f"could not parse the tool call: {action!r}"
    if isinstance(action, str):
        name = next(iter(getattr(executor, "actions", None) or {}), None)
        return {"name": name, "parameters": {code_parameter: action}}
    if isinstance(action, dict) and "name" in action:
        params = action.get("parameters", action.get("arguments")) or {}
        return {"name": action["name"], "parameters": params}
    if isinstance(action, dict) and isinstance(action.get("request"), str):  # langroid's form
        rest = {k: v for k, v in action.items() if k not in ("request", "purpose")}
        return {"name": action["request"], "parameters": rest}
    return action  # malformed: the executor answers ARGS_ERROR naming the problem


class ActionProcessor(Hook):
    """Turns a ``ToolParser`` reply into an executor call, and a result into text.

    ``before_action`` reads ``message.formatted`` (``{'tool_type', 'thought', 'action',
    'status'}`` or ``{'name', 'parameters'}``); a code string becomes a call of the executor's
    first action with ``{code_parameter: code}``. ``after_action`` replaces an ``ActionReturn``
    by its formatted result (or its error message).
    """

    def __init__(self, code_parameter: str = "command") -> None:
        self.code_parameter = code_parameter

    def before_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        message = copy.deepcopy(message)
        formatted = message.formatted
        if isinstance(formatted, dict) and "name" in formatted:
            message.content = tool_call(executor, {"action": formatted}, self.code_parameter)
        elif isinstance(formatted, dict) and "action" in formatted:
            message.content = tool_call(executor, formatted, self.code_parameter)
        # Anything else is not a parsed tool call: the executor reports the bad call.
        return message

    def after_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        if isinstance(message.content, ActionReturn):
            message.content = action_return_text(message.content)
        return message


#: lagent's names for the same hook.
InternLMActionProcessor = ActionProcessor
ActionPreprocessor = ActionProcessor

__all__ = [
    "ActionPreprocessor",
    "ActionProcessor",
    "Hook",
    "InternLMActionProcessor",
    "RemovableHandle",
    "action_return_text",
    "apply_hooks",
    "tool_call",
]
