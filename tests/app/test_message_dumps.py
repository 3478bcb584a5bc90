"""``app.runtime.messages``: ``jsonable``'s and ``dump_message``'s fast paths (exact dicts,
lists and JSON atoms; a message whose fields are plain trees) answer what the generic walk
(the module's code before them, kept here as the reference) answers, value and types."""

from __future__ import annotations

import dataclasses
import datetime
import enum
import json
from typing import Any

import pytest
from pydantic import BaseModel

from agents.chat_agent import chat_message, reply_message
from agents.schema import ActionReturn, ActionStatusCode, AgentMessage, AgentStatusCode
from app.runtime.messages import dump_message, jsonable


def reference(value: Any) -> Any:
    """The generic walk, as it was before the fast paths."""
    if isinstance(value, ActionReturn):
        return value.to_dict()
    if isinstance(value, BaseModel):
        return reference(value.model_dump())
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return reference(dataclasses.asdict(value))
    if isinstance(value, enum.Enum):
        return reference(value.value)
    if isinstance(value, dict):
        return {str(k): reference(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set):
        return [reference(v) for v in value]
    if value is None or isinstance(value, str | int | float | bool):
        return value
    return str(value)


class Label(enum.StrEnum):
    A = "a"


class Text(str):
    pass


@dataclasses.dataclass
class Point:
    x: int
    tags: tuple[str, ...] = ("p",)


class Item(BaseModel):
    name: str
    state: AgentStatusCode = AgentStatusCode.STREAM_ING


ACTION = ActionReturn(args={"q": 1}, type="search", result=[{"type": "text", "content": "ok"}])
VALUES: list[Any] = [
    None,
    True,
    0,
    1.5,
    "text",
    {"a": 1, 2: [1, 2.0, None, (3, "x")], "n": {"m": {"k": [True, False]}}},
    [{"role": "user", "content": "hi"}, ("t", 1)],
    (1, "2", [3]),
    {1: "one", "1": "string one"},  # keys that collide once made strings: the later wins
    {"state": AgentStatusCode.END, "label": Label.A},
    {"set": {1}},
    {"when": datetime.datetime(2026, 12, 1, tzinfo=datetime.UTC)},
    {"point": Point(1), "item": Item(name="i"), "action": ACTION},
    {"text": Text("sub"), "int": ActionStatusCode.SUCCESS, "bytes": b"x"},
    ACTION,
    Point(2),
    Item(name="j"),
]


def _types(value: Any) -> Any:
    """The value's shape with each node's exact type (equal values of other types differ)."""
    if isinstance(value, dict):
        return {(type(k), k): _types(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_types(v) for v in value]
    return (type(value), value)


@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_jsonable_answers_as_the_generic_walk(value: Any) -> None:
    got = jsonable(value)
    assert _types(got) == _types(reference(value))
    if isinstance(got, dict):
        assert list(got) == list(reference(value))  # the keys' order
    json.dumps(got)  # JSON as it is


def _messages() -> list[AgentMessage]:
    out = [
        AgentMessage(sender="user", content="hi"),
        chat_message("user", "hi", [{"role": "user", "content": "hi"}]),
        reply_message("agent", "hello", []),
        reply_message("agent", "", [{"id": "c1", "name": "f", "arguments": {"a": 1}}]),
        AgentMessage(sender="a", content="x", stream_state=AgentStatusCode.STREAM_ING),
        AgentMessage(sender="a", content={"k": (1, 2)}, formatted=[1, {"2": None}], extra_info=3),
    ]
    out += [AgentMessage(sender="a", content=v, formatted={"v": v}) for v in VALUES]
    when = {"when": datetime.date(2026, 1, 1)}
    out.append(AgentMessage(sender="a", content="x", extra_info=when))
    return out


@pytest.mark.parametrize("message", _messages(), ids=lambda m: repr(m.content)[:20])
def test_dump_message_answers_as_the_generic_walk(message: AgentMessage) -> None:
    got = dump_message(message)
    want = reference(message)
    assert _types(got) == _types(want)
    assert list(got) == list(want)  # the fields' order


def test_dump_message_copies_the_trees() -> None:
    messages = [{"role": "user", "content": "hi"}]
    message = chat_message("user", "hi", messages)
    dumped = dump_message(message)
    dumped["formatted"]["chat"][0]["content"] = "changed"
    assert messages[0]["content"] == "hi"
    assert message.formatted["chat"][0]["content"] == "hi"
