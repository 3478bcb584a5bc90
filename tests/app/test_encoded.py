"""``EncodedJSON`` cannot drift from its contents; one chunk builder; one SSE frame writer."""

from __future__ import annotations

import json

import pytest

from app.api.sse import data_frame, frame
from app.models.encoded import ChunkEncoder, EncodedJSON, dumps


def test_encoded_json_is_built_once_and_read_only() -> None:
    obj = EncodedJSON({"a": [1, "é"], "usage": None})
    assert obj.raw == dumps({"a": [1, "é"], "usage": None})
    for mutate in (
        lambda: obj.__setitem__("a", 2),
        lambda: obj.__delitem__("a"),
        lambda: obj.update(b=1),
        lambda: obj.pop("a"),
        lambda: obj.popitem(),
        lambda: obj.setdefault("c", 1),
        lambda: obj.clear(),
    ):
        with pytest.raises(TypeError, match="read-only"):
            mutate()
    assert json.loads(obj.raw) == obj == {"a": [1, "é"], "usage": None}


def test_parsed_bytes_are_kept_and_match_the_object() -> None:
    raw = b'{"id": "x",  "usage":null,"choices":[]}'
    obj = EncodedJSON.parse(raw)
    assert obj.raw is raw and obj == json.loads(raw)
    trimmed = obj.without_null("usage")
    assert trimmed == {"id": "x", "choices": []} and json.loads(trimmed.raw) == trimmed
    with pytest.raises(ValueError):
        EncodedJSON.parse(b"[1, 2]")


def test_chunk_builder_raw_is_the_whole_encoding() -> None:
    enc = ChunkEncoder({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m"})
    chunks = [
        enc.role(0),
        enc.content(0, 'a "b"\n'),
        enc.delta(0, {"content": "x"}, logprobs={"content": []}),
        enc.delta(0, {"tool_calls": [{"index": 0}]}),
        enc.finish(0, "stop"),
        enc.usage({"total_tokens": 3}),
    ]
    for chunk in chunks:
        assert chunk.raw == dumps(dict(chunk))
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == {"total_tokens": 3}


def test_sse_frames() -> None:
    assert frame(b'{"a":1}', event="run.created", id=3, retry=3000) == (
        b'id: 3\nevent: run.created\ndata: {"a":1}\nretry: 3000\n\n'
    )
    assert frame(comment="end", retry=5) == b": end\nretry: 5\n\n"
    assert data_frame(EncodedJSON.parse(b'{"x": 1}')) == b'data: {"x": 1}\n\n'
    assert data_frame({"x": 1}) == b'data: {"x":1}\n\n'


def test_dumps_is_the_compact_json_encoding_byte_for_byte() -> None:
    """``dumps`` (the C encoder made once) writes what ``json.dumps`` with compact separators
    and UTF-8 kept writes, and refuses what it refuses."""
    from app.schemas.vocab import EventType

    values = [
        "é \n\"\\ \x00 \u2028", 1, -0.0, 1.5, 1e16, 1e-7, float("inf"), float("nan"), None, True,
        [], {}, (1, "a"), 123456789012345678901234567890, EventType.MESSAGE_DELTA,
        {"a": [1, {"b": "ü"}], 2: None, 1.5: "k", True: 1, None: 2},
        EncodedJSON({"x": [EventType.RUN_CREATED, 2.5]}),
    ]  # fmt: skip
    for value in values:
        assert dumps(value) == json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode()
    for bad in ({"a": object()}, {(1, 2): 1}, b"x"):
        with pytest.raises(TypeError):
            dumps(bad)
