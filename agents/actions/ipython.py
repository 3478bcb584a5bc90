"""lagent's IPython tools, backed by sandboxed kernels (one per session and agent).

``IPythonInteractive().run('print(63*63.0)').format_result() == '3969.0'``. The kernel is the
one of the session in ``current_session_id`` (set by the executors) and of this tool's
``agent`` name; state and the work dir persist across calls.
"""

from __future__ import annotations

import base64
import re
import secrets
from typing import Any

from agents.actions.base import AsyncActionMixin, BaseAction, current_session_id, tool_api
from agents.sandbox import CellResult, KernelPool, SandboxError, default_pool
from agents.schema import ActionReturn, ActionStatusCode

__all__ = [
    "AsyncIPythonInteractive",
    "AsyncIPythonInterpreter",
    "IPythonInteractive",
    "IPythonInterpreter",
]

_FENCED = re.compile(r"```(?:python|py)?\s*\n(.*?)```", re.S)


def extract_code(command: str) -> str:
    """The code inside markdown fences if there are any (models often add them)."""
    blocks = _FENCED.findall(command)
    return "\n".join(blocks) if blocks else command


class _SandboxedIPython(BaseAction):
    """Shared logic of the sync and async tools (no tool API of its own)."""

    def __init__(
        self,
        timeout: float = 30,
        max_out_len: int = 8192,
        *,
        pool: KernelPool | None = None,
        agent: str = "default",
        description: dict[str, Any] | None = None,
        enable: bool = True,
    ) -> None:
        if description is None and type(self).__name__.startswith("Async"):
            # The async twin answers to the same name, so prompts and tool calls carry over.
            description = {**self.__tool_description__, "name": type(self).__name__[5:]}
        super().__init__(description, enable)
        self.timeout = timeout
        self.max_out_len = max_out_len
        self.agent = agent
        self._pool = pool

    @property
    def pool(self) -> KernelPool:
        """The kernel pool this tool runs in (the process-wide one unless given)."""
        if self._pool is None:
            self._pool = default_pool()
        return self._pool

    @staticmethod
    def session_key() -> str:
        """The current session (as the executors set it)."""
        return str(current_session_id.get())

    def reset(self, session_id: str | int | None = None) -> None:
        """Stop the session's kernel: the next call starts a fresh one (files are kept)."""
        from agents.utils import run_sync

        key = self.session_key() if session_id is None else str(session_id)
        run_sync(self.pool.shutdown_session(key))

    def _result(self, command: str, cell: CellResult) -> ActionReturn:
        """Translate a cell into lagent's ActionReturn (text, images; errors with tracebacks)."""
        items: list[dict[str, Any]] = []
        text = self._trim(cell.output.rstrip())
        notes = [n for n in cell.notes if n not in text]
        # A fresh kernel's notes say what was lost (the gateway adds one when it replaced one).
        if cell.truncated or cell.status in ("timeout", "died") or cell.fresh:
            text = "\n".join(x for x in (text, *notes) if x)
        if text:
            items.append({"type": "text", "content": text})
        key = self.session_key()
        for png in cell.images:
            name = f".images/{secrets.token_hex(6)}.png"
            path = self.pool.save_file(key, name, png)
            items.append(
                {"type": "image", "content": path, "mime": "image/png",
                 "data": base64.b64encode(png).decode()}
            )  # fmt: skip
        ret = ActionReturn(args={"command": command}, type=self.name, result=items)
        if cell.status != "ok":
            ret.errmsg = cell.error_summary() or "\n".join(cell.notes)
            if cell.status in ("timeout", "died") and cell.notes:
                ret.errmsg = cell.notes[-1]
            elif cell.fresh and notes:
                ret.errmsg = "\n".join([ret.errmsg, *notes])
            ret.state = ActionStatusCode.API_ERROR
        return ret

    def _trim(self, text: str) -> str:
        if len(text) <= self.max_out_len:
            return text
        half = self.max_out_len // 2
        cut = len(text) - 2 * half
        return f"{text[:half]}\n... [{cut} characters cut] ...\n{text[-half:]}"

    def _refused(self, command: str, exc: Exception) -> ActionReturn:
        return ActionReturn(
            args={"command": command}, type=self.name, errmsg=f"{type(exc).__name__}: {exc}",
            state=ActionStatusCode.API_ERROR,
        )  # fmt: skip


class IPythonInteractive(_SandboxedIPython):
    """An interactive IPython shell for code execution."""

    @tool_api
    def run(self, command: str, timeout: float | None = None) -> ActionReturn:
        """Execute Python code in a Jupyter notebook environment.

        Args:
            command (str): Python code snippet
            timeout (float, optional): timeout for execution in seconds. Defaults to None.
        """
        code = extract_code(command)
        try:
            cell = self.pool.execute_sync(
                self.session_key(), code, agent=self.agent, timeout_s=timeout or self.timeout
            )
        except (SandboxError, RuntimeError) as exc:
            return self._refused(command, exc)
        return self._result(command, cell)


class AsyncIPythonInteractive(AsyncActionMixin, _SandboxedIPython):  # type: ignore[misc]
    """An interactive IPython shell for code execution."""

    @tool_api
    async def run(self, command: str, timeout: float | None = None) -> ActionReturn:  # noqa: ASYNC109
        """Execute Python code in a Jupyter notebook environment.

        Args:
            command (str): Python code snippet
            timeout (float, optional): timeout for execution in seconds. Defaults to None.
        """
        code = extract_code(command)
        try:
            cell = await self.pool.execute(
                self.session_key(), code, agent=self.agent, timeout_s=timeout or self.timeout
            )
        except (SandboxError, RuntimeError) as exc:
            return self._refused(command, exc)
        return self._result(command, cell)


class IPythonInterpreter(IPythonInteractive):
    """When you send a message containing Python code, it is executed in a stateful Jupyter
    notebook environment (a sandboxed kernel of this session)."""

    def __init__(self, timeout: float = 20, max_out_len: int = 8192, **kwargs: Any) -> None:
        super().__init__(timeout, max_out_len, **kwargs)


class AsyncIPythonInterpreter(AsyncIPythonInteractive):
    """When you send a message containing Python code, it is executed in a stateful Jupyter
    notebook environment (a sandboxed kernel of this session)."""

    def __init__(self, timeout: float = 20, max_out_len: int = 8192, **kwargs: Any) -> None:
        super().__init__(timeout, max_out_len, **kwargs)
