"""Messages and status codes, identical in names, values and fields to lagent v1's schema."""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass
from enum import Enum, IntEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, field_validator


class ModelStatusCode(IntEnum):
    """Status of a model generation (lagent's ``ModelStatusCode``)."""

    END = 0
    STREAM_ING = 1
    SERVER_ERR = -1
    SESSION_CLOSED = -2
    SESSION_OUT_OF_LIMIT = -3
    SESSION_INVALID_ARG = -4
    SESSION_READY = 2


class AgentStatusCode(IntEnum):
    """Status of an agent message in a stream."""

    END = 0
    STREAM_ING = 1
    SERVER_ERR = -1
    SESSION_CLOSED = -2
    SESSION_OUT_OF_LIMIT = -3
    SESSION_INVALID_ARG = -4
    SESSION_READY = 2
    PLUGIN_START = 3
    PLUGIN_END = 4
    PLUGIN_RETURN = 5
    CODING = 6
    CODE_END = 7
    CODE_RETURN = 8


class ActionStatusCode(int, Enum):
    """Outcome of a tool call."""

    ING = 1
    SUCCESS = 0
    HTTP_ERROR = -1000
    ARGS_ERROR = -1001
    API_ERROR = -1002


class ActionValidCode(int, Enum):
    """Validity of a parsed tool call."""

    FINISH = 1
    OPEN = 0
    CLOSED = -1
    INVALID = -2
    ABSENT = -3


@dataclass
class ActionReturn:
    """The result of one tool call; ``result`` is a list of ``{'type', 'content'}`` items."""

    args: dict[str, Any] | None = None
    url: str | None = None
    type: str | None = None
    result: list[dict[str, Any]] | None = None
    errmsg: str | None = None
    state: ActionStatusCode | int = ActionStatusCode.SUCCESS
    thought: str | None = None
    valid: ActionValidCode | None = ActionValidCode.OPEN

    def format_result(self) -> str:
        """Concatenate the result items: text as is, other types as ``[type](content)``."""
        parts = []
        for item in self.result or []:
            if item["type"] == "text":
                parts.append(str(item["content"]))
            else:
                parts.append(f"[{item['type']}]({item['content']})")
        return "\n".join(parts)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (enums as ints)."""
        data = asdict(self)
        data["state"] = int(self.state)
        data["valid"] = None if self.valid is None else int(self.valid)
        return data


#: Assignments of an ``AgentMessage``'s ``content`` or ``sender`` so far (any message): the
#: aggregator's kept renders are valid only while this count is what it was when they were made.
RENDER_EDITS = [0]
_RENDERED_FIELDS = frozenset({"content", "sender"})
_EDITS_LOCK = threading.Lock()


class AgentMessage(BaseModel):
    """One message between users, agents and tools (lagent's ``AgentMessage``)."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    content: Any
    sender: str = "user"
    formatted: Any | None = None
    extra_info: Any | None = None
    type: str | None = None
    receiver: str | None = None
    stream_state: ModelStatusCode | AgentStatusCode = AgentStatusCode.END

    @field_validator("stream_state", mode="before")
    @classmethod
    def _agent_status(cls, value: Any) -> Any:
        # A plain int from JSON is an AgentStatusCode (the union would pick ModelStatusCode).
        # A member as it is (``AgentStatusCode(member)`` is that member: an enum call per
        # streamed chunk, issue 25).
        if type(value) is AgentStatusCode:
            return value
        if isinstance(value, int) and not isinstance(value, ModelStatusCode):
            try:
                return AgentStatusCode(value)
            except ValueError:
                return value
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        super().__setattr__(name, value)
        # A stored message's text or sender assigned anew: renders of it kept by
        # ``agents.aggregator`` are stale from now on (``RENDER_EDITS``). Counted after the
        # assignment (a render made in between is made under the old count), under a lock (no
        # increment lost between threads).
        if name in _RENDERED_FIELDS:
            with _EDITS_LOCK:
                RENDER_EDITS[0] += 1

    def copy(self, *, deep: bool = False, **_: Any) -> AgentMessage:  # type: ignore[override,unused-ignore]
        """lagent's ``msg.copy(deep=True)`` without pydantic's deprecation warning."""
        return self.model_copy(deep=deep)

    # Byzer-Agent's reply functions read messages as dicts ``{"content", "metadata"}``.
    def get(self, key: str, default: Any = None) -> Any:
        """``message.get("content")``, ``.get("metadata", {})`` (``extra_info``) or a field."""
        name = "extra_info" if key == "metadata" else key
        value = getattr(self, name, None) if name in type(self).model_fields else None
        return default if value is None else value

    def __getitem__(self, key: str) -> Any:
        """``message["content"]``, ``message["metadata"]`` (``extra_info``, ``{}`` if none)."""
        name = "extra_info" if key == "metadata" else key
        if name not in type(self).model_fields:
            raise KeyError(key)
        value = getattr(self, name)
        return {} if key == "metadata" and value is None else value
