"""AgentMessage <-> JSON (what rows, events and responses hold)."""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from pydantic import BaseModel

from agents.schema import ActionReturn, AgentMessage

# Values of these exact types are JSON as they are (no subclass: an IntEnum is an int).
_ATOMS = frozenset({str, int, float, bool, type(None)})
_NOT_PLAIN: Any = object()  # ``_plain``: the tree holds something else


def jsonable(value: Any) -> Any:
    """``value`` as plain JSON types (enums as ints, dataclasses and models as dicts)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:  # (the generic walk's answer for an exact dict, without its tests)
        return {
            k if type(k) is str else str(k): v if type(v) in _ATOMS else jsonable(v)
            for k, v in value.items()
        }
    if kind is list or kind is tuple:
        return [v if type(v) in _ATOMS else jsonable(v) for v in value]
    return _walk(value)


def _walk(value: Any) -> Any:
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


def _plain(value: Any) -> Any:
    """``jsonable(value)`` for a tree of exact dicts, lists, tuples and JSON atoms; else
    ``_NOT_PLAIN`` (a model's dump may turn what such a tree holds into something else first,
    e.g. a dataclass into a dict)."""
    kind = type(value)
    if kind in _ATOMS:
        return value
    if kind is dict:
        out = {}
        for k, v in value.items():
            v = v if type(v) in _ATOMS else _plain(v)
            if v is _NOT_PLAIN:
                return _NOT_PLAIN
            out[k if type(k) is str else str(k)] = v
        return out
    if kind is list or kind is tuple:
        items = []
        for v in value:
            v = v if type(v) in _ATOMS else _plain(v)
            if v is _NOT_PLAIN:
                return _NOT_PLAIN
            items.append(v)
        return items
    return _NOT_PLAIN


def dump_message(message: AgentMessage) -> dict[str, Any]:
    """A JSON-ready AgentMessage dump (the stored and served form)."""
    if type(message) is AgentMessage:
        # As ``jsonable`` dumps it (the model's dump, then the generic walk), field by field
        # when its content, formatted and extra_info are plain trees (text, a chat message's
        # ``formatted``): no model dump, no walk (issue 25: a stored turn dumps ~5 messages).
        content = _plain(message.content)
        formatted = _plain(message.formatted)
        extra = _plain(message.extra_info)
        if content is not _NOT_PLAIN and formatted is not _NOT_PLAIN and extra is not _NOT_PLAIN:
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
