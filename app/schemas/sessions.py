"""Sessions and runs."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.agents import AgentName, GenParams
from app.schemas.common import MessageIn, Name, Page
from app.schemas.vocab import RunStatus, StrategyName


class SessionCreate(BaseModel):
    """POST /v1/sessions."""

    model_config = ConfigDict(strict=True)

    agent: AgentName
    id: Annotated[str, Name] | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


class SessionUpdate(BaseModel):
    """PATCH /v1/sessions/{id}: ``metadata`` merged into the session's (a key set to null is
    removed: JSON Merge Patch, one level deep)."""

    model_config = ConfigDict(strict=True, extra="forbid")

    metadata: dict[str, Any]


class SessionPublic(BaseModel):
    """A session."""

    id: str
    agent: str
    agent_version: int
    metadata: dict[str, Any]
    created_at: datetime
    updated_at: datetime
    usage: UsagePublic | None = None  # totals over the session's runs (GET of one session)


SessionList = Page[SessionPublic]


class RunCreate(BaseModel):
    """POST /v1/sessions/{id}/messages."""

    model_config = ConfigDict(strict=True)

    message: MessageIn | str
    stream: bool = Field(default=False, strict=True)
    multitask_strategy: StrategyName = "reject"
    on_disconnect: Literal["cancel", "continue"] = "cancel"
    gen_params: GenParams = Field(default_factory=GenParams)


class MemoryEntry(BaseModel):
    """A memory entry as ``PUT /v1/sessions/{id}/memory`` takes it (app.services.sessions:
    an AgentMessage, whose unknown fields are ignored, or a string, a user message). Documents
    that body in the OpenAPI document (app.openapi); the service validates it itself."""

    content: Any
    sender: str = "user"
    formatted: Any = None
    extra_info: Any = None
    type: str | None = None
    receiver: str | None = None
    stream_state: Literal[-4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7, 8] | None = (
        None  # AgentStatusCode
    )


# A memory key: ``memory`` (the agent's), ``<sub-agent>.memory``, ``<a>.<b>.memory`` (its
# state_dict's keys); which exist depends on the session's agent (422 unknown_memory_key).
MEMORY_KEY = r"^([^.]+\.)*memory$"
MemoryState = Annotated[
    dict[str, list[MemoryEntry | str]],
    Field(json_schema_extra={"propertyNames": {"pattern": MEMORY_KEY}}),
]


class UsagePublic(BaseModel):
    """Token usage of a run."""

    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class PendingToolCall(BaseModel):
    """A tool call a run waits on: validated arguments, as the model asked for them."""

    id: str
    name: str
    arguments: dict[str, Any]


class RequiredAction(BaseModel):
    """What a ``requires_action`` run waits for: a decision per call (docs/approvals.md)."""

    type: Literal["tool_calls"]
    tool_calls: list[PendingToolCall]
    since: datetime | None
    deadline: datetime | None  # ``approval.timeout_s`` after ``since`` (None: no timeout)


class Decision(BaseModel):
    """A person's decision about one pending call."""

    model_config = ConfigDict(strict=True, extra="forbid")

    id: str = Field(min_length=1, max_length=128)
    action: Literal["approve", "deny", "edit"]
    message: str | None = Field(default=None, max_length=100_000)  # deny: the tool's result
    arguments: dict[str, Any] | None = None  # edit: the arguments to run the call with


class ResumeRequest(BaseModel):
    """POST /v1/runs/{id}/resume: one decision per pending call."""

    model_config = ConfigDict(strict=True, extra="forbid")

    decisions: list[Decision] = Field(min_length=1, max_length=64)
    stream: bool = Field(default=False, strict=True)
    on_disconnect: Literal["cancel", "continue"] = "continue"


class RunPublic(BaseModel):
    """A run."""

    id: str
    session_id: str
    agent: str
    status: RunStatus
    stop_reason: str | None
    input: dict[str, Any]
    output: dict[str, Any] | None
    error: dict[str, Any] | None
    usage: UsagePublic
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    required_action: RequiredAction | None = None  # status ``requires_action``: the calls
    # The run's OpenTelemetry trace (32 hex digits) when the service traces (docs/observability.md).
    trace_id: str | None = None


RunList = Page[RunPublic]


class RunResult(BaseModel):
    """A finished non-streaming run and its final message."""

    run: RunPublic
    message: dict[str, Any] | None
