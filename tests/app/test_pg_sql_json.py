"""The run store's JSON parameters on PostgreSQL (``pg_sql.dumps``, ``events_json``): the same
text ``json.dumps`` writes, so the stored ``json`` columns keep their exact text."""

from __future__ import annotations

import json
import math
from enum import StrEnum
from typing import Any

import pytest

from app.runtime.store import pg_sql


class Kind(StrEnum):
    DELTA = "message.delta"


VALUES: list[Any] = [
    None,
    True,
    0,
    -(10**30),
    1.5,
    1e-300,
    math.inf,
    math.nan,
    "",
    'é "q" \\ \n \u2028 \U0001f600 \x00',
    Kind.DELTA,
    [],
    {},
    {"content": "hi", "sender": "user", "formatted": None, "extra_info": {"a": [1, {"b": 2.0}]}},
    {1: "int key", 2.5: "float key", False: "bool key", None: "none key"},
    [{"key": "memory", "index": 3, "data": {"content": "ünïcode", "stream_state": 0}}],
]


@pytest.mark.parametrize("value", VALUES)
def test_dumps_writes_what_json_dumps_writes(value: Any) -> None:
    assert pg_sql.dumps(value) == json.dumps(value)


def test_dumps_refuses_what_json_dumps_refuses() -> None:
    for bad in (object(), {"x": {1, 2}}, {(1, 2): "tuple key"}):
        with pytest.raises(TypeError):
            json.dumps(bad)
        with pytest.raises(TypeError):
            pg_sql.dumps(bad)


def _events_json_before(events: list[dict[str, Any]]) -> str:
    """``events_json`` as it was written with ``json.dumps``."""
    parts = []
    for e in events:
        raw = e.get("raw")
        data = raw.decode() if raw is not None else json.dumps(e["data"])
        parts.append(f'{{"seq":{int(e["seq"])},"type":{json.dumps(e["type"])},"data":{data}}}')
    return "[" + ",".join(parts) + "]"


def test_events_json_is_the_text_it_was() -> None:
    events: list[dict[str, Any]] = [
        {"seq": 1, "type": "run.created", "data": {"run": {"id": "run_1", "usage": None}}},
        {"seq": 2, "type": Kind.DELTA, "data": {"delta": "é \U0001f600"}},
        {"seq": 3, "type": "message", "data": {}, "raw": b'{"content":"h\\u00e9"}'},
        {"seq": 4, "type": "run.completed", "data": {"n": math.nan}},
    ]
    assert pg_sql.events_json(events) == _events_json_before(events)
    assert json.loads(pg_sql.events_json(events))[2]["data"] == {"content": "hé"}
