"""AgentMessage <-> JSON (what rows, events and responses hold)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from pydantic import BaseModel

from agents.schema import ActionReturn, AgentMessage


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (enums as ints, dataclasses and models as dicts)."""
    if isinstance(value, ActionReturn):
        return value.to_dict()
    if isinstance(value, BaseModel):
        return jsonable(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return jsonable(dataclasses.asdict(value))
    if isinstance(value, enum.Enum):
        return jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [jsonable(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


_PLAIN = (str, type(None))


def dump_message(message: AgentMessage) -> dict[str, Any]:
    """A JSON-ready AgentMessage dump (the stored and served form)."""
    content, formatted, extra = message.content, message.formatted, message.extra_info
    if (
        type(message) is AgentMessage
        and type(content) in _PLAIN
        and type(formatted) in _PLAIN
        and type(extra) in _PLAIN
    ):
        # The common case (text), as ``jsonable`` would dump it, without the generic walk.
        state = message.stream_state
        return {
            "content": content,
            "sender": message.sender,
            "formatted": formatted,
            "extra_info": extra,
            "type": message.type,
            "receiver": message.receiver,
            "stream_state": state.value if isinstance(state, enum.Enum) else state,
        }
    data: dict[str, Any] = jsonable(message)
    return data
