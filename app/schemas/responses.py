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

# Item and tool types given a shape here; any other type is accepted and not used (dropped
# with a logged note). The "any other" pattern needs Python's regex (a lookahead).
_MINE = "message|function_call|function_call_output|custom_tool_call_output|mcp_approval_response"
_OTHER_ITEM = rf"^(?!({_MINE})$).+$"
_OTHER_TOOL = r"^(?!function$).+$"
# Unknown fields are accepted; the types of known ones are strict (JSON 0 is not false).
_LENIENT = ConfigDict(extra="allow", regex_engine="python-re", strict=True)


class MessageItem(BaseModel):
    """A message: ``system``, ``developer`` (a system message), ``user``, ``assistant``;
    content a string or parts (``input_text``/``output_text``/``text`` parts are its text,
    others are dropped)."""

    model_config = _LENIENT

    type: Literal["message"] | None = None
    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[dict[str, Any]] | None = None


class FunctionCallItem(BaseModel):
    """An earlier call of one of the client's functions."""

    model_config = _LENIENT

    type: Literal["function_call"]
    call_id: str
    name: str
    arguments: str | dict[str, Any] | None = None


class FunctionCallOutputItem(BaseModel):
    """The result of a function call (a ``tool`` message with its ``call_id``)."""

    model_config = _LENIENT

    type: Literal["function_call_output", "custom_tool_call_output"]
    call_id: str
    output: str | list[dict[str, Any]] | None = None


class ApprovalResponseItem(BaseModel):
    """A decision about a call an agent waits on (``mcp_approval_request``'s ``id``)."""

    model_config = _LENIENT

    type: Literal["mcp_approval_response"]
    approval_request_id: str
    approve: bool
    reason: str | None = None


class OtherItem(BaseModel):
    """Any other item (``reasoning``, ``item_reference``, ...): accepted, not used."""

    model_config = _LENIENT

    type: str = Field(pattern=_OTHER_ITEM)


ItemIn = MessageItem | FunctionCallItem | FunctionCallOutputItem | ApprovalResponseItem | OtherItem


class FunctionTool(BaseModel):
    """A function the model may call (the client runs it)."""

    model_config = _LENIENT

    type: Literal["function"]
    name: str = Field(min_length=1, max_length=128)
    description: str | None = None
    parameters: dict[str, Any] | None = None
    strict: bool | None = None


class OtherTool(BaseModel):
    """A tool of a type this server does not host for the request (dropped, logged)."""

    model_config = _LENIENT

    type: str = Field(pattern=_OTHER_TOOL)


ToolIn = FunctionTool | OtherTool


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

    model_config = _LENIENT

    model: str = Field(min_length=1, max_length=256)
    # Read item by item by app.services.responses_input (its 400s name the item, e.g.
    # ``input[2].role``); ``ResponseCreateDoc`` documents their shapes.
    input: str | list[dict[str, Any]] = Field(default_factory=list)
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

    def items(self) -> str | list[dict[str, Any]]:
        """``input`` as sent."""
        return self.input

    def tool_dicts(self) -> list[dict[str, Any]]:
        """``tools`` as sent."""
        return self.tools

    def conversation_id(self) -> str | None:
        """The conversation's id, whichever way it was sent."""
        if isinstance(self.conversation, ConversationRef):
            return self.conversation.id
        return self.conversation


class ResponseCreateDoc(ResponseCreate):
    """POST /v1/responses as the OpenAPI document states it: the shapes of the input items
    and tools ``ResponseCreate`` reads one by one."""

    input: str | list[ItemIn] = Field(default_factory=list)  # type: ignore[assignment]
    tools: list[ToolIn] = Field(default_factory=list)  # type: ignore[assignment]


class ConversationCreate(BaseModel):
    """POST /v1/conversations."""

    model_config = ConfigDict(extra="allow")

    items: list[ItemIn] | None = Field(default=None, max_length=20)

    def item_dicts(self) -> list[dict[str, Any]]:
        return [item.model_dump(exclude_none=True) for item in self.items or []]

    metadata: dict[str, str] | None = None


class ConversationUpdate(BaseModel):
    """POST /v1/conversations/{id}: its metadata."""

    model_config = ConfigDict(extra="allow")

    metadata: dict[str, str]


class ItemsCreate(BaseModel):
    """POST /v1/conversations/{id}/items."""

    model_config = ConfigDict(extra="allow")

    items: list[ItemIn] = Field(min_length=1, max_length=20)

    def item_dicts(self) -> list[dict[str, Any]]:
        return [item.model_dump(exclude_none=True) for item in self.items]
