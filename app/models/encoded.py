"""JSON objects that carry their own encoding, so the gateway sends bytes instead of re-encoding.

A proxied upstream answer is passed through as the upstream's bytes; a streamed chunk of the
scripted/LLM raw backend is built from a per-stream prefix encoded once, with only the
JSON-escaped text spliced in. Both stay dicts, so ops instrumentation can still read them.
"""

from __future__ import annotations

import json
from typing import Any

_dumps = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False).encode
_escape = json.encoder.encode_basestring  # C; what ensure_ascii=False uses for strings


def dumps(obj: Any) -> bytes:
    """Compact JSON (no spaces, UTF-8 kept), as the gateway writes every SSE event."""
    return _dumps(obj).encode()


class EncodedJSON(dict[str, Any]):
    """A JSON object and ``raw``, its encoding; read-only by contract (``raw`` is not updated)."""

    __slots__ = ("raw",)

    def __init__(self, data: dict[str, Any], raw: bytes) -> None:
        super().__init__(data)
        self.raw = raw


def encoded(obj: dict[str, Any]) -> bytes:
    """``obj``'s bytes: ``raw`` for an ``EncodedJSON``, else compact JSON."""
    return obj.raw if isinstance(obj, EncodedJSON) else dumps(obj)


class ChunkEncoder:
    """The ``chat.completion.chunk`` objects of one stream, each with its compact encoding.

    ``base`` (id, object, created, model) is encoded once; ``content`` then costs one string
    escape. ``raw`` equals ``dumps`` of the same dict, byte for byte (tests check it).
    """

    def __init__(self, base: dict[str, Any]) -> None:
        self.base = base
        self._head = dumps(base)[:-1] + b',"choices":[{"index":'
        self._tail = b'},"finish_reason":null,"logprobs":null}]}'

    def content(self, index: int, text: str) -> EncodedJSON:
        """A chunk whose delta is ``{"content": text}``."""
        choice = {
            "index": index,
            "delta": {"content": text},
            "finish_reason": None,
            "logprobs": None,
        }
        raw = b"".join(
            (self._head, b"%d" % index, b',"delta":{"content":', _escape(text).encode(), self._tail)
        )
        chunk = EncodedJSON(self.base, raw)  # one copy of base; "choices" after it, as in raw
        chunk["choices"] = [choice]
        return chunk

    def chunk(self, obj: dict[str, Any]) -> EncodedJSON:
        """Any other chunk (role, finish, usage), encoded whole."""
        return EncodedJSON(obj, dumps(obj))
