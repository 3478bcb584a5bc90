"""JSON objects that carry their own encoding, so the gateway sends bytes instead of re-encoding,
and the one builder of ``chat.completion.chunk`` objects (``ChunkEncoder``).

An ``EncodedJSON`` is built once, from its object (``EncodedJSON(obj)`` encodes it) or from its
bytes (``EncodedJSON.parse(raw)``, a proxied upstream answer passed through as the upstream's
bytes), and cannot be changed afterwards, so ``raw`` never drifts from the contents. A streamed
chunk is built by ``ChunkEncoder`` from a per-stream prefix encoded once, with only the
JSON-escaped text spliced in (``raw`` is byte for byte ``dumps`` of the object: tests check
it). Both stay dicts, so ops instrumentation can still read them.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

_escape = json.encoder.encode_basestring  # C; what ensure_ascii=False uses for strings
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
_dumps = _ENCODER.encode
# ``_ENCODER.encode``'s own C encoder, made once: ``encode`` and ``iterencode`` are Python
# frames that built a new one for every call (a stored turn encodes ~13 objects: its event
# rows and frames; issue 25). The same arguments ``iterencode`` passes, except ``markers``:
# None, no circular-reference check (a cycle raises RecursionError instead of ValueError;
# the gateway encodes trees it built or parsed).
_make = getattr(json.encoder, "c_make_encoder", None)
_iterencode: Any = (
    None
    if _make is None
    else _make(None, _ENCODER.default, _escape, None, ":", ",", False, False, True)
)


def dumps(obj: Any) -> bytes:
    """Compact JSON (no spaces, UTF-8 kept), as the gateway writes every SSE event."""
    if _iterencode is None:  # no C accelerator: the Python encoder
        return _dumps(obj).encode()
    return "".join(_iterencode(obj, 0)).encode()


class EncodedJSON(dict[str, Any]):
    """A read-only JSON object and ``raw``, its encoding (made from the object, or the object
    parsed from it). Mutating it raises ``TypeError``; derive a new one instead."""

    __slots__ = ("raw",)

    def __init__(self, data: dict[str, Any]) -> None:
        super().__init__(data)
        self.raw = dumps(data)

    @classmethod
    def parse(cls, raw: bytes) -> EncodedJSON:
        """The object ``raw`` encodes, keeping ``raw`` (``ValueError`` if it is no JSON object)."""
        data = json.loads(raw)
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")
        return cls._spliced(data, raw)

    @classmethod
    def _spliced(cls, data: dict[str, Any], raw: bytes) -> EncodedJSON:
        # For this module's builders only: ``raw`` is known to encode ``data``.
        obj = dict.__new__(cls)
        dict.update(obj, data)
        obj.raw = raw
        return obj

    def without_null(self, key: str) -> EncodedJSON:
        """A copy without the top-level ``key`` whose value is null (bytes edited, not
        re-encoded, when the encoding allows; re-encoded otherwise)."""
        data = {k: v for k, v in self.items() if k != key}
        for null in (b',"%s":null' % key.encode(), b'"%s":null,' % key.encode()):
            if null in self.raw and self.get(key, ...) is None:
                return EncodedJSON._spliced(data, self.raw.replace(null, b"", 1))
        return EncodedJSON(data)

    def _readonly(self, *args: Any, **kwargs: Any) -> NoReturn:
        raise TypeError("EncodedJSON is read-only: build a new one")

    __setitem__ = __delitem__ = __ior__ = _readonly
    clear = pop = popitem = setdefault = update = _readonly

    def __reduce__(self) -> Any:
        return (EncodedJSON, (dict(self),))


def encoded(obj: dict[str, Any]) -> bytes:
    """``obj``'s bytes: ``raw`` for an ``EncodedJSON``, else compact JSON."""
    return obj.raw if isinstance(obj, EncodedJSON) else dumps(obj)


class ChunkEncoder:
    """The ``chat.completion.chunk`` objects of one stream, each with its compact encoding: the
    one builder of chunks (the engine path, the agent path, the raw-LLM backends).

    ``base`` (id, object, created, model, and ``usage: null`` when the client asked for usage)
    is encoded once; ``content`` then costs one string escape.
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
        return EncodedJSON._spliced({**self.base, "choices": [choice]}, raw)

    def delta(
        self,
        index: int,
        delta: dict[str, Any],
        finish_reason: str | None = None,
        logprobs: dict[str, Any] | None = None,
    ) -> EncodedJSON:
        """A chunk with one choice's ``delta`` (and its finish reason or logprobs)."""
        if finish_reason is None and logprobs is None and len(delta) == 1:
            text = delta.get("content")
            if type(text) is str:
                return self.content(index, text)
        choice = {
            "index": index,
            "delta": delta,
            "finish_reason": finish_reason,
            "logprobs": logprobs,
        }
        return EncodedJSON({**self.base, "choices": [choice]})

    def role(self, index: int) -> EncodedJSON:
        """A choice's first chunk: ``{"role": "assistant", "content": ""}``."""
        return self.delta(index, {"role": "assistant", "content": ""})

    def finish(self, index: int, reason: str | None) -> EncodedJSON:
        """A choice's last chunk: an empty delta and its finish reason."""
        return self.delta(index, {}, finish_reason=reason)

    def usage(self, usage: dict[str, Any]) -> EncodedJSON:
        """The stream's usage chunk (no choices), sent last when the client asked for it."""
        base = {k: v for k, v in self.base.items() if k != "usage"}
        return EncodedJSON({**base, "choices": [], "usage": usage})

    def chunk(self, obj: dict[str, Any]) -> EncodedJSON:
        """Any other chunk, encoded whole."""
        return EncodedJSON(obj)
