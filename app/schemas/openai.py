"""OpenAI chat-completion requests (validated; unknown fields ignored).

Strict types, as the OpenAPI document states them: JSON ``true`` is not the number 1 and
``"2"`` is not 2. Rules across fields are validators here and JSON Schema in the document
(``json_schema_extra``), side by side.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

from app.schemas.common import WHOLE, Int

_CONTENT: dict[str, Any] = {"anyOf": [{"type": "string"}, {"type": "array"}]}
# ChatMessage._check as JSON Schema: what each role requires.
_ROLES: dict[str, Any] = {
    "anyOf": [
        {
            "properties": {
                "role": {"enum": ["system", "developer", "user"]},
                "content": _CONTENT,
            },
            "required": ["content"],
        },
        {
            "properties": {
                "role": {"const": "tool"},
                "content": _CONTENT,
                "tool_call_id": {"type": "string", "minLength": 1},
            },
            "required": ["content", "tool_call_id"],
        },
        {
            "properties": {"role": {"const": "assistant"}, "content": _CONTENT},
            "required": ["content"],
        },
        {
            "properties": {
                "role": {"const": "assistant"},
                "tool_calls": {"type": "array", "minItems": 1},
            },
            "required": ["tool_calls"],
        },
    ]
}
# The request's validators as JSON Schema: stream_options needs stream, top_logprobs logprobs.
_REQUIRES: dict[str, Any] = {
    "allOf": [
        {
            "if": {
                "properties": {"stream_options": {"type": "object"}},
                "required": ["stream_options"],
            },
            "then": {"properties": {"stream": {"const": True}}, "required": ["stream"]},
        },
        {
            "if": {
                "properties": {"top_logprobs": {"type": "integer"}},
                "required": ["top_logprobs"],
            },
            "then": {"properties": {"logprobs": {"const": True}}, "required": ["logprobs"]},
        },
    ]
}


# The validators of ``stop`` and ``tool_choice`` as JSON Schema (a ``Literal`` or a constrained
# list in the union would name the union's branch in the error's ``param``).
_TOOL_CHOICE: dict[str, Any] = {
    "anyOf": [{"enum": ["none", "auto", "required"]}, {"type": "object"}, {"type": "null"}]
}


class _Open(BaseModel):
    model_config = ConfigDict(extra="ignore", strict=True)


class ChatMessage(_Open):
    """One message of ``messages``."""

    model_config = ConfigDict(json_schema_extra=_ROLES)

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    @model_validator(mode="after")
    def _check(self) -> ChatMessage:
        if self.role == "tool" and not self.tool_call_id:
            raise ValueError("a tool message needs tool_call_id")
        if self.role in ("user", "system", "developer", "tool") and self.content is None:
            raise ValueError(f"a {self.role} message needs content")
        if self.role == "assistant" and self.content is None and not self.tool_calls:
            raise ValueError("an assistant message needs content or tool_calls")
        return self

    def text(self) -> str:
        """The message's text (text parts joined)."""
        if isinstance(self.content, list):
            return "".join(str(p.get("text", "")) for p in self.content if p.get("type") == "text")
        return self.content or ""


class StreamOptions(_Open):
    """``stream_options``."""

    include_usage: bool = False


class ResponseFormat(_Open):
    """``response_format``."""

    type: Literal["text", "json_object", "json_schema"]
    json_schema: dict[str, Any] | None = None


class ToolDef(_Open):
    """A ``tools`` entry."""

    type: Literal["function"]
    function: dict[str, Any]


class ChatCompletionRequest(_Open):
    """POST /v1/chat/completions."""

    model_config = ConfigDict(json_schema_extra=_REQUIRES)

    model: str = Field(min_length=1)
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = Field(default=False, strict=True)
    stream_options: StreamOptions | None = None
    temperature: float | None = Field(default=None, ge=0, le=2)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: Annotated[int, Field(ge=1, le=16), WHOLE] | None = None
    max_tokens: Annotated[int, Field(ge=1), WHOLE] | None = None
    max_completion_tokens: Annotated[int, Field(ge=1), WHOLE] | None = None
    stop: str | list[str] | None = Field(default=None, json_schema_extra={"maxItems": 4})
    seed: Int | None = None
    logprobs: bool | None = None
    top_logprobs: Annotated[int, Field(ge=0, le=20), WHOLE] | None = None
    presence_penalty: float | None = Field(default=None, ge=-2, le=2)
    frequency_penalty: float | None = Field(default=None, ge=-2, le=2)
    tools: list[ToolDef] | None = None
    tool_choice: str | dict[str, Any] | None = Field(default=None, json_schema_extra=_TOOL_CHOICE)
    parallel_tool_calls: bool | None = None
    response_format: ResponseFormat | None = None
    user: str | None = None

    @field_validator("stream_options")
    @classmethod
    def _stream_options(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and not info.data.get("stream"):
            raise ValueError("stream_options is only allowed when stream is true")
        return value

    @field_validator("top_logprobs")
    @classmethod
    def _top_logprobs(cls, value: Any, info: ValidationInfo) -> Any:
        if value is not None and not info.data.get("logprobs"):
            raise ValueError("top_logprobs requires logprobs to be true")
        return value

    @field_validator("stop")
    @classmethod
    def _stop(cls, value: Any) -> Any:
        if isinstance(value, list) and len(value) > 4:
            raise ValueError("stop takes at most 4 sequences")
        return value

    @field_validator("tool_choice")
    @classmethod
    def _tool_choice(cls, value: Any) -> Any:
        if isinstance(value, str) and value not in ("none", "auto", "required"):
            raise ValueError("tool_choice must be none, auto, required or a function choice")
        return value

    def gen_params(self) -> dict[str, Any]:
        """Agent LLM parameters from the request."""
        params: dict[str, Any] = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "max_new_tokens": self.max_completion_tokens or self.max_tokens,
            "seed": self.seed,
        }
        if self.stop is not None:
            params["stop_words"] = [self.stop] if isinstance(self.stop, str) else self.stop
        return {k: v for k, v in params.items() if v is not None}


def inline_json_schema(model: type[BaseModel]) -> dict[str, Any]:
    """``model``'s JSON Schema with every ``$ref`` replaced by its definition (no ``$defs``).

    For an OpenAPI operation that documents a body it parses itself (``openapi_extra``): its
    ``$defs`` would not resolve there. The models here are not recursive.
    """
    schema = model.model_json_schema()
    defs = schema.pop("$defs", {})

    def inline(node: Any) -> Any:
        if isinstance(node, dict):
            if "$ref" in node:
                return inline(defs[node["$ref"].rsplit("/", 1)[-1]])
            return {key: inline(value) for key, value in node.items()}
        if isinstance(node, list):
            return [inline(value) for value in node]
        return node

    result: dict[str, Any] = inline(schema)
    return result
