"""Agent definitions: the JSON ``spec`` and the Agent resource."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.ops.budget import BudgetSpec
from app.schemas.common import WHOLE, Int, Name, Page


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


class AgentSpec(BaseModel):
    """What an agent is made of; every name is checked against the registry and the models."""

    model_config = ConfigDict(extra="forbid", strict=True)

    kind: str = "agent"
    model: str  # a configured model (the registry checks the name)
    system_prompt: str | None = None
    gen_params: GenParams = Field(default_factory=GenParams)
    output_format: OutputFormat | None = None
    aggregator: Literal["default", "tool"] = "default"
    tools: list[ToolRef] = Field(default_factory=list)
    max_turn: Int = Field(default=5, ge=1, le=100)
    sub_agents: dict[str, AgentSpec] = Field(default_factory=dict)
    budget: BudgetSpec | None = None  # tokens per session (app.ops.budget)


AgentName = Annotated[str, Name]


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
