"""Shared shapes: lists, timestamps, messages."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, Field

T = TypeVar("T")

Name = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._\-]*$")


class Page(BaseModel, Generic[T]):
    """A page of a list, newest first."""

    data: list[T]
    has_more: bool


class MessageIn(BaseModel):
    """An AgentMessage as clients send it (``stream_state`` is ignored on input)."""

    model_config = ConfigDict(extra="forbid")

    content: Any
    sender: str = Field(default="user", min_length=1, max_length=128)
    formatted: Any | None = None
    extra_info: Any | None = None
    type: str | None = None
    receiver: str | None = None
    stream_state: int | None = None
