"""Small safe tools: lagent's Invalid/No/Finish actions, a calculator, a clock, a web browser."""

from __future__ import annotations

import ast
import math
import operator
from collections.abc import Callable
from datetime import datetime
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from agents.actions.base import BaseAction, tool_api
from agents.actions.web import WebBrowser
from agents.schema import ActionReturn, ActionStatusCode, ActionValidCode

__all__ = ["Calculator", "Clock", "FinishAction", "InvalidAction", "NoAction", "WebBrowser"]


class _ErrorReply(BaseAction):
    """Answers what it cannot run with an error the model can read (``_state`` says why)."""

    sync_in_thread = False  # cheap: no thread hop
    _state: ClassVar[ActionStatusCode]

    def __init__(self, err_msg: str, description: dict[str, Any] | None = None) -> None:
        super().__init__(description, enable=False)
        self._err_msg = err_msg

    def run(self, err_msg: str | None = None) -> ActionReturn:
        """Return the error message.

        Args:
            err_msg: what was wrong; the default message when omitted.
        """
        return ActionReturn(
            args={"text": err_msg}, errmsg=err_msg or self._err_msg, type=self.name,
            valid=ActionValidCode.INVALID, state=self._state,
        )  # fmt: skip


class InvalidAction(_ErrorReply):
    """Answers a call to an unknown tool with an error the model can read."""

    _state = ActionStatusCode.ARGS_ERROR

    def __init__(
        self, err_msg: str = "The action is invalid, please check the action name.",
        description: dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        super().__init__(err_msg, description)


class NoAction(_ErrorReply):
    """Answers a reply that does not follow the tool-call format."""

    _state = ActionStatusCode.API_ERROR

    def __init__(
        self, err_msg: str = "Please follow the format", description: dict[str, Any] | None = None
    ) -> None:
        super().__init__(err_msg, description)


class FinishAction(BaseAction):
    """Returns the final answer."""

    sync_in_thread = False  # cheap: no thread hop

    def run(self, response: str) -> ActionReturn:
        """Return the final result.

        Args:
            response: the final result.
        """
        return ActionReturn(
            args={"text": response}, result=[{"type": "text", "content": response}],
            type=self.name, valid=ActionValidCode.FINISH, state=ActionStatusCode.SUCCESS,
        )  # fmt: skip


_BINARY: dict[type[ast.operator], Callable[[Any, Any], Any]] = {
    ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul,
    ast.Div: operator.truediv, ast.FloorDiv: operator.floordiv, ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}  # fmt: skip
_UNARY: dict[type[ast.unaryop], Callable[[Any], Any]] = {
    ast.UAdd: operator.pos,
    ast.USub: operator.neg,
}
_FUNCTIONS: dict[str, Callable[..., Any]] = {
    "abs": abs, "round": round, "min": min, "max": max, "sqrt": math.sqrt, "exp": math.exp,
    "log": math.log, "log10": math.log10, "sin": math.sin, "cos": math.cos, "tan": math.tan,
    "floor": math.floor, "ceil": math.ceil, "factorial": math.factorial,
}  # fmt: skip
_CONSTANTS = {"pi": math.pi, "e": math.e, "tau": math.tau}
_MAX_BITS = 4096  # bounds every intermediate integer: 9**9**9 must fail fast, not hang


class Calculator(BaseAction):
    """Evaluates arithmetic expressions safely (no Python evaluation)."""

    sync_in_thread = False  # cheap: no thread hop

    def run(self, expression: str) -> int | float:
        """Evaluate an arithmetic expression such as ``(2 + 3) * sqrt(16) / 2``.

        Args:
            expression: numbers, + - * / // % **, parentheses, pi, e and functions like
                sqrt, log, sin, cos, abs, round, min, max.
        """
        tree = ast.parse(expression.strip(), mode="eval")
        value: int | float = _evaluate(tree.body)
        return value


def _evaluate(node: ast.AST) -> Any:
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and isinstance(left, int) and isinstance(right, int):
            if right > 0 and abs(left).bit_length() * right > _MAX_BITS:
                raise ValueError("result too large")
        result = _BINARY[type(node.op)](left, right)
        if isinstance(result, int) and result.bit_length() > _MAX_BITS:
            raise ValueError("result too large")
        return result
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        func = _FUNCTIONS.get(node.func.id)
        if func is not None:
            if func is math.factorial and _evaluate(node.args[0]) > 1000:
                raise ValueError("result too large")
            return func(*(_evaluate(arg) for arg in node.args))
    raise ValueError(f"unsupported expression: {ast.unparse(node)!r}")


class Clock(BaseAction):
    """Tells the current date and time."""

    sync_in_thread = False  # cheap: no thread hop

    @tool_api
    def current_time(self, timezone: str = "UTC") -> str:
        """The current date and time in ISO 8601 format.

        Args:
            timezone: an IANA time zone name such as ``Europe/Paris``.
        """
        try:
            zone = ZoneInfo(timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {timezone!r}") from None
        return datetime.now(zone).isoformat(timespec="seconds")
