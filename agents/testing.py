"""Test doubles shipped with the library: ``ScriptedLLM`` and ``FakeKernel``.

``FakeKernel`` is an IPython-like tool that runs code in-process, one namespace per session
(no sandbox: for tests and demos with trusted code only). It answers like
``IPythonInteractive``: printed output, then the value of a final expression; an exception is
an ``API_ERROR`` whose message is the exception's last traceback line.
"""

from __future__ import annotations

import ast
import contextlib
import io
import traceback
from typing import Any

from agents.actions.base import BaseAction, current_session_id
from agents.llms.scripted import ScriptedLLM, SyncScriptedLLM
from agents.schema import ActionReturn, ActionStatusCode


class FakeKernel(BaseAction):
    """Runs Python code in a per-session namespace, like a (trusting) IPython kernel."""

    def __init__(self, name: str = "IPythonInteractive", timeout: float | None = None) -> None:
        super().__init__(description={**self.__tool_description__, "name": name})
        self.timeout = timeout
        self.namespaces: dict[Any, dict[str, Any]] = {}
        self.calls: list[tuple[Any, str]] = []

    async def run(self, command: str) -> ActionReturn:
        """Execute Python code and return what it printed and the value of its last expression.

        Args:
            command: the Python code to run.
        """
        # Async on purpose: the code runs on the event loop, so concurrent sessions never
        # interleave their redirected stdout.
        session_id = current_session_id.get()
        self.calls.append((session_id, command))
        namespace = self.namespaces.setdefault(session_id, {"__name__": "__main__"})
        stdout = io.StringIO()
        try:
            with contextlib.redirect_stdout(stdout):
                value = _execute(command, namespace)
        except Exception as exc:
            line = traceback.format_exception_only(type(exc), exc)[-1].strip()
            return ActionReturn(
                args={"command": command}, type=self.name, errmsg=line,
                state=ActionStatusCode.API_ERROR,
            )  # fmt: skip
        text = stdout.getvalue()
        if value is not None:
            text += repr(value)
        return ActionReturn(
            args={"command": command}, type=self.name,
            result=[{"type": "text", "content": text.rstrip("\n")}],
        )  # fmt: skip

    def reset(self, session_id: Any = 0) -> None:
        """Forget a session's variables."""
        self.namespaces.pop(session_id, None)


def _execute(code: str, namespace: dict[str, Any]) -> Any:
    """Run ``code``; return the value of a trailing expression (None otherwise)."""
    tree = ast.parse(code, mode="exec")
    last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
    if last is not None:
        tree.body.pop()
    exec(compile(tree, "<cell>", "exec"), namespace)  # trusted test code only
    if last is None:
        return None
    return eval(compile(ast.Expression(last.value), "<cell>", "eval"), namespace)


__all__ = ["FakeKernel", "ScriptedLLM", "SyncScriptedLLM"]
