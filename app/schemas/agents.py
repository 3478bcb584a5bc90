"""Agent definitions: the JSON ``spec`` and the Agent resource."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.ops.budget import BudgetSpec
from app.schemas.common import WHOLE, Int, Name, Page
from app.schemas.vocab import StrategyName


class GenParams(BaseModel):
    """Generation parameters an agent's LLM is called with."""

    model_config = ConfigDict(extra="forbid", strict=True)

    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    top_k: Annotated[int, Field(ge=1), WHOLE] | None = None
    max_new_tokens: Annotated[int, Field(ge=1, le=1_000_000), WHOLE] | None = None
    repetition_penalty: float | None = Field(default=None, gt=0)
    stop_words: list[str] | None = None
    seed: Int | None = None

    def to_kwargs(self) -> dict[str, Any]:
        """The set parameters only."""
        return self.model_dump(exclude_none=True)


class OutputFormat(BaseModel):
    """How the agent's replies are parsed.

    ``tool``: a fenced tool call, ``json``, ``str``, or ``native``: the model's own tool calls
    (tools through its chat template, calls read by its tool-call parser; ``tool_choice``).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    type: Literal["tool", "json", "str", "native"] = "tool"
    tool_type: str = "code interpreter"
    begin: str = "```python\n"
    end: str = "\n```\n"
    # native only: "auto" (default), "required", "none" or {"type": "function", "function": ...}
    tool_choice: Literal["auto", "required", "none"] | dict[str, Any] | None = None


class ToolRef(BaseModel):
    """A registered tool and its configuration."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1)
    config: dict[str, Any] = Field(default_factory=dict)
    # A person approves each call of this tool first (docs/approvals.md).
    requires_approval: bool = False


AgentName = Annotated[str, Name]
# A participant's name inside a multi-agent spec: a memory key part, so no dots.
MemberName = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][\w\-]*$")]


class ApprovalSpec(BaseModel):
    """Tool calls that wait for a person's decision (docs/approvals.md)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    # Tool names (``Tool`` or ``Tool.api``), or "all": every tool call waits.
    tools: Literal["all"] | list[Annotated[str, Field(min_length=1, max_length=200)]] = "all"
    # Nobody decided within this many seconds: deny every pending call, or cancel the run.
    timeout_s: Annotated[int, Field(ge=1, le=90 * 86400), WHOLE] | None = None
    on_timeout: Literal["deny", "cancel"] = "deny"


class DoneSpec(BaseModel):
    """When a ``task`` is done (any rule that fires ends it with status DONE)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    contains: str | None = Field(default=None, min_length=1)  # a reply containing this text
    if_response: list[str] = Field(default_factory=list)  # "llm", "agent", "user", sub-tasks
    if_no_response: list[str] = Field(default_factory=list)
    tool: bool = False  # the model may call ``done_tool`` (tool agents only)


class RunBudgetSpec(BaseModel):
    """A ``task``'s budget per run (tokens of every participant; cost at these prices)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_tokens: Annotated[int, Field(ge=1, le=10**12), WHOLE] | None = None
    max_cost: float | None = Field(default=None, gt=0)
    prompt_cost_per_1k: float = Field(default=0.0, ge=0)
    completion_cost_per_1k: float = Field(default=0.0, ge=0)


class SubTaskSpec(BaseModel):
    """A sub-task of a ``task``: another agent (stored, by name, or inline) as a responder."""

    model_config = ConfigDict(extra="forbid", strict=True)

    agent: AgentSpec | AgentName
    name: MemberName | None = None  # default: the stored agent's name (dots as _), or "sub<i>"
    single_round: bool = True
    max_turns: Annotated[int, Field(ge=1, le=1000), WHOLE] | None = None
    done: DoneSpec | None = None


class AgentSpec(BaseModel):
    """What an agent is made of; every name is checked against the registry and the models."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str = "agent"
    model: str | None = None  # a configured model (remote and task kinds need none)
    system_prompt: str | None = None
    gen_params: GenParams = Field(default_factory=GenParams)
    output_format: OutputFormat | None = None
    aggregator: Literal["default", "tool"] = "default"
    tools: list[ToolRef] = Field(default_factory=list)
    max_turn: Int = Field(default=5, ge=1, le=100)
    # What a message to a busy session does when the request does not say (REST's
    # multitask_strategy, the OpenAI front door's X-Multitask-Strategy); None: reject.
    multitask_strategy: StrategyName | None = None
    # kind "tool_agent": tool calls that wait for a person (with ``requires_approval`` tools).
    approval: ApprovalSpec | None = None
    # Other agents: inline specs, or stored agents by name (pinned when a session starts).
    sub_agents: dict[str, AgentSpec | AgentName] = Field(default_factory=dict)
    budget: BudgetSpec | None = None  # tokens per session (app.ops.budget)
    # An agent on another server, over A2A (agents.remote.RemoteAgent): its base URL, and the
    # name of the environment variable holding its API key (AGENTSTATION_REMOTE_KEY_*).
    remote: str | None = Field(default=None, max_length=2048, pattern=r"^https?://[^/\s]+")
    api_key_env: str | None = Field(
        default=None, max_length=128, pattern=r"^AGENTSTATION_REMOTE_KEY_[A-Za-z0-9_]+$"
    )
    # kind "task" (agents.Task): its agent, sub-tasks and termination rules.
    agent: AgentSpec | AgentName | None = None
    sub_tasks: list[SubTaskSpec] | None = Field(default=None, max_length=32)
    done: DoneSpec | None = None
    max_turns: Annotated[int, Field(ge=1, le=1000), WHOLE] | None = None
    max_stalled_steps: Annotated[int, Field(ge=1, le=100), WHOLE] | None = None  # None: 3
    run_budget: RunBudgetSpec | None = None
    # kind "user_proxy" (agents.user_proxy): the person talks to ``agent`` through a user proxy
    # that asks them per Byzer-Agent's human_input_mode (the run waits: docs/approvals.md).
    human_input_mode: Literal["ALWAYS", "TERMINATE", "NEVER"] | None = None
    max_consecutive_auto_reply: Annotated[int, Field(ge=0, le=100), WHOLE] | None = None

    def approval_tools(self) -> list[str] | None:
        """The tools whose calls wait for a person (``["*"]``: all); None: none do."""
        named = [ref.name for ref in self.tools if ref.requires_approval]
        if self.approval is not None:
            if self.approval.tools == "all":
                return ["*"]
            named += self.approval.tools
        return sorted(set(named)) if named else None

    def children(self, prefix: str = "spec") -> list[tuple[str, AgentSpec | str]]:
        """The directly nested agents (inline specs or names), with their parameter paths."""
        found: list[tuple[str, AgentSpec | str]] = [
            (f"{prefix}.sub_agents.{key}", sub) for key, sub in self.sub_agents.items()
        ]
        if self.agent is not None:
            found.append((f"{prefix}.agent", self.agent))
        tasks = enumerate(self.sub_tasks or [])
        found += [(f"{prefix}.sub_tasks[{i}].agent", t.agent) for i, t in tasks]
        return found

    def model_names(self) -> set[str]:
        """The models this spec and its inline agents use (a remote agent uses none of this
        server's: its ``model``, if set, is not checked or loaded here)."""
        if self.remote is not None:
            return set()
        names = {self.model} if self.model is not None else set()
        for _, child in self.children():
            if isinstance(child, AgentSpec):
                names |= child.model_names()
        return names

    def references(self) -> set[str]:
        """Names of stored agents this spec (or an inline spec in it) refers to."""
        names: set[str] = set()
        for _, child in self.children():
            names |= {child} if isinstance(child, str) else child.references()
        return names


SubTaskSpec.model_rebuild()


class AgentCreate(BaseModel):
    """POST /v1/agents."""

    model_config = ConfigDict(strict=True)

    name: AgentName
    description: str | None = Field(default=None, max_length=10_000)
    spec: AgentSpec


class AgentUpdate(BaseModel):
    """PUT /v1/agents/{name}."""

    model_config = ConfigDict(strict=True)

    description: str | None = Field(default=None, max_length=10_000)
    spec: AgentSpec


class AgentPublic(BaseModel):
    """An agent definition at its current version."""

    id: str
    name: str
    description: str | None
    version: int
    spec: dict[str, Any]
    created_at: datetime
    updated_at: datetime


AgentList = Page[AgentPublic]


class AgentVersionPublic(BaseModel):
    """One stored version of an agent's spec (``GET /v1/agents/{name}/versions``)."""

    agent: str  # the agent's name
    version: int
    spec: dict[str, Any]
    created_at: datetime
    current: bool  # the agent's current version


AgentVersionList = Page[AgentVersionPublic]


class AgentRollback(BaseModel):
    """POST /v1/agents/{name}/rollback: make version ``version``'s spec current again."""

    model_config = ConfigDict(extra="forbid", strict=True)

    version: Annotated[int, Field(ge=1, le=2**31 - 1), WHOLE]
