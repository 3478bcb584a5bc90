"""Shared shapes: lists, timestamps, messages."""

from __future__ import annotations

from typing import Annotated, Any, Generic, TypeVar

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field

T = TypeVar("T")


def _whole(value: Any) -> Any:
    return int(value) if isinstance(value, float) and value.is_integer() else value


# Request models are strict (JSON true is not 1, "2" is not 2: the types the OpenAPI document
# states); an integer field still takes 4.0, which JSON Schema counts as an integer. Bounds of
# an optional one go before WHOLE, ``Annotated[int, Field(ge=1), WHOLE] | None`` (after it,
# pydantic's JSON Schema spells them ``ge`` instead of ``minimum``).
WHOLE = BeforeValidator(_whole)
Int = Annotated[int, WHOLE]

NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._\-]*$"
NAME_MAX_LENGTH = 128
Name = Field(min_length=1, max_length=NAME_MAX_LENGTH, pattern=NAME_PATTERN)


class Page(BaseModel, Generic[T]):
    """A page of a list, newest first."""

    data: list[T]
    has_more: bool


class MessageIn(BaseModel):
    """An AgentMessage as clients send it (``stream_state`` is ignored on input)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    content: Any
    sender: str = Field(default="user", min_length=1, max_length=128)
    formatted: Any | None = None
    extra_info: Any | None = None
    type: str | None = None
    receiver: str | None = None
    stream_state: Int | None = None
