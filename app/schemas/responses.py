"""The Responses API's requests (``POST /v1/responses``, ``/v1/conversations``).

Lenient on purpose: real clients (Codex CLI, the OpenAI Agents SDK) send fields this server
does not use (``reasoning``, ``include``, ``prompt_cache_key``, ``client_metadata``, tools it
does not host); they are accepted and documented in docs/responses.md, never a 400 that stops
the client. Input items are checked one by one by ``app.services.responses_input``.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from app.schemas.common import WHOLE

ItemIn = dict[str, Any]  # one input item (checked by app.services.responses_input)


class ConversationRef(BaseModel):
    """``conversation: {"id": ...}`` (a plain id string is accepted too)."""

    model_config = ConfigDict(extra="allow")

    id: str = Field(min_length=1, max_length=128)


class TextFormat(BaseModel):
    """``text.format``: ``text``, ``json_object``, or ``json_schema`` (name, schema, strict)."""

    model_config = ConfigDict(extra="allow")

    type: Literal["text", "json_object", "json_schema"] = "text"
    name: str | None = None
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    strict: bool | None = None
    description: str | None = None


class TextConfig(BaseModel):
    """``text``: the answer's format (and ``verbosity``, accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    format: TextFormat | None = None
    verbosity: str | None = None


class ResponseCreate(BaseModel):
    """POST /v1/responses (OpenAI's fields; unknown ones are accepted and ignored)."""

    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1, max_length=256)
    input: str | list[ItemIn] = Field(default_factory=list)
    instructions: str | None = None
    previous_response_id: str | None = Field(default=None, max_length=128)
    conversation: str | ConversationRef | None = None
    store: bool = True
    background: bool = False
    stream: bool = False
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: Literal["auto", "required", "none"] | dict[str, Any] | None = None
    parallel_tool_calls: bool = True
    text: TextConfig | None = None
    max_output_tokens: Annotated[int, Field(ge=1, le=1_000_000), WHOLE] | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    metadata: dict[str, str] | None = None
    reasoning: dict[str, Any] | None = None
    include: list[str] | None = None
    prompt_cache_key: str | None = None
    client_metadata: dict[str, Any] | None = None
    user: str | None = None
    truncation: str | None = None

    def conversation_id(self) -> str | None:
        """The conversation's id, whichever way it was sent."""
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation


class ConversationCreate(BaseModel):
    """POST /v1/conversations."""

    model_config = ConfigDict(extra="allow")

    items: list[ItemIn] | None = Field(default=None, max_length=20)
    metadata: dict[str, str] | None = None


class ConversationUpdate(BaseModel):
    """POST /v1/conversations/{id}: its metadata."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, str]


class ItemsCreate(BaseModel):
    """POST /v1/conversations/{id}/items."""

    model_config = ConfigDict(extra="allow")

    items: list[ItemIn] = Field(min_length=1, max_length=20)
