"""Human approval of tool calls: a hook on the executor that approves, denies, edits or pauses.

An executor built with ``approval=`` asks it about every call before running the tool::

    executor = AsyncActionExecutor([FakeKernel()], approval=RequireApproval(["IPythonInteractive"]))

The hook gets the call (``PendingCall``: ``id``, ``name``, ``arguments``) and the session id, may
be sync or async, and answers a ``Decision`` (``approve()``, ``deny(message)``,
``edit(arguments)``), ``None`` (approve) or ``PAUSE``: wait for a person. A tool agent then stops
before the call (its reply is the call), keeps the call in ``agent.pending[session_id]`` and
continues with ``agent.resume(decisions, session_id=...)``. An executor called directly raises
``ApprovalRequired`` instead.
"""

from __future__ import annotations

import inspect
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Final, Literal

from agents.schema import ActionReturn, ActionStatusCode, ActionValidCode

PAUSE: Final = "pause"
Action = Literal["approve", "deny", "edit"]
ACTIONS: tuple[Action, ...] = ("approve", "deny", "edit")


@dataclass(frozen=True)
class Decision:
    """A person's answer to one pending call."""

    action: Action
    message: str | None = None  # deny: what the model reads as the tool's result
    arguments: dict[str, Any] | None = None  # edit: the arguments to run the call with

    def __post_init__(self) -> None:
        if self.action not in ACTIONS:
            raise ValueError(f"action must be one of {ACTIONS}, got {self.action!r}")
        if self.action == "edit" and not isinstance(self.arguments, dict):
            raise ValueError("an edit needs new arguments (a JSON object)")

    @classmethod
    def approve(cls) -> Decision:
        return cls("approve")

    @classmethod
    def deny(cls, message: str | None = None) -> Decision:
        return cls("deny", message=message)

    @classmethod
    def edit(cls, arguments: dict[str, Any]) -> Decision:
        return cls("edit", arguments=arguments)


@dataclass
class PendingCall:
    """A tool call waiting for a decision."""

    id: str
    name: str
    arguments: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "arguments": self.arguments}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingCall:
        return cls(str(data["id"]), str(data["name"]), dict(data.get("arguments") or {}))


def new_call_id() -> str:
    """An id for a call the model's format gave none (OpenAI's shape: ``call_<hex>``)."""
    return f"call_{uuid.uuid4().hex[:24]}"


@dataclass
class PendingApproval:
    """Where a paused tool agent stopped: its calls, the model turn, and whether it was code."""

    calls: list[PendingCall]
    turn: int = 0
    code: bool = False
    extra: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "tool_calls": [c.to_dict() for c in self.calls],
            "turn": self.turn,
            "code": self.code,
            **({"extra": self.extra} if self.extra else {}),
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PendingApproval:
        return cls(
            calls=[PendingCall.from_dict(c) for c in data.get("tool_calls") or []],
            turn=int(data.get("turn") or 0),
            code=bool(data.get("code")),
            extra=dict(data.get("extra") or {}),
        )


class ApprovalRequired(Exception):
    """An executor called directly was told to wait for a person about ``calls``."""

    def __init__(self, calls: list[PendingCall]) -> None:
        super().__init__(f"tool calls wait for approval: {[c.name for c in calls]}")
        self.calls = calls


HookResult = Decision | str | None
ApprovalHook = Callable[[PendingCall, Any], HookResult | Awaitable[HookResult]]


class RequireApproval:
    """The usual hook: pause before the named tools (``"all"``: before every tool)."""

    def __init__(self, tools: Iterable[str] | Literal["all"] = "all") -> None:
        self.all = tools == "all"
        self.tools = frozenset() if tools == "all" else frozenset(tools)

    def needs(self, name: str) -> bool:
        """Whether a call of ``name`` (``Tool``, ``Tool.api`` or ``Tool__api``) waits."""
        if self.all:
            return True
        base = name.split(".", 1)[0].split("__", 1)[0]
        return name in self.tools or base in self.tools

    def __call__(self, call: PendingCall, session_id: Any) -> HookResult:
        return PAUSE if self.needs(call.name) else None


async def ask(hook: ApprovalHook | None, call: PendingCall, session_id: Any) -> Decision | str:
    """The hook's answer as a ``Decision`` or ``PAUSE`` (no hook, or None: approve)."""
    if hook is None:
        return Decision.approve()
    answer = hook(call, session_id)
    if inspect.isawaitable(answer):
        answer = await answer
    if answer is None:
        return Decision.approve()
    if isinstance(answer, Decision):
        return answer
    if answer == PAUSE:
        return PAUSE
    if answer in ACTIONS:
        return Decision(answer)
    raise ValueError(f"an approval hook answers a Decision, None or 'pause', got {answer!r}")


def _field(item: Any, name: str) -> Any:
    return item[name] if isinstance(item, Mapping) else getattr(item, name)


def denial(call: PendingCall, message: str | None) -> ActionReturn:
    """The result a denied call gives the model: the person's message, or a plain refusal."""
    text = "The user denied this tool call."
    if message:
        text += f" {message}"
    return ActionReturn(
        args=call.arguments, type=call.name, result=[{"type": "text", "content": text}],
        state=ActionStatusCode.SUCCESS, valid=ActionValidCode.OPEN,
    )  # fmt: skip


def as_decisions(
    decisions: Mapping[str, Decision | Mapping[str, Any]] | Iterable[Any],
) -> dict[str, Decision]:
    """``{call id: Decision}`` from a mapping, or a list of ``{"id", "action", ...}`` dicts."""
    out: dict[str, Decision] = {}
    items: Iterable[tuple[Any, Any]]
    if isinstance(decisions, Mapping):
        items = decisions.items()
    else:
        items = [(_field(d, "id"), d) for d in decisions]
    for call_id, value in items:
        if isinstance(value, Decision):
            out[str(call_id)] = value
        else:
            out[str(call_id)] = Decision(
                value["action"], message=value.get("message"), arguments=value.get("arguments")
            )
    return out


__all__ = [
    "PAUSE",
    "ApprovalHook",
    "ApprovalRequired",
    "Decision",
    "PendingApproval",
    "PendingCall",
    "RequireApproval",
    "as_decisions",
    "ask",
    "denial",
    "new_call_id",
]
