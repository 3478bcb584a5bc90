"""OTLP trace export requests written straight to protobuf's wire format, for the HTTP exporter.

The SDK's encoder (``opentelemetry.exporter.otlp.proto.common.trace_encoder.encode_spans``)
builds a protobuf object per span, attribute and value before serialising them: ~100 µs of
Python per GenAI span on the bench machine, in the exporter's thread but under the GIL, so it
was most of what tracing cost a request. ``encode_request`` writes the same bytes (same fields,
same order: ``tests/ops/test_otlp_encode.py`` compares them with the SDK's for every kind of
span, attribute value, event, link, status and parent) at a fraction of the cost, and
``FastOTLPSpanExporter`` sends them with the SDK's own HTTP client (retries, headers,
compression, timeouts as configured by ``OTEL_EXPORTER_OTLP_*``). The message definitions are
OTLP's stable ``opentelemetry/proto/trace/v1/trace.proto`` and ``common/v1/common.proto``.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExportResult

_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_double = struct.Struct("<d").pack
# Span flags (trace.proto): the parent's "is remote" is known, and whether it is remote.
HAS_IS_REMOTE = 0x100
IS_REMOTE = 0x200


def _varint(value: int) -> bytes:
    if value < 0:
        value += 1 << 64  # int64: two's complement, ten bytes
    if value < 0x80:
        return _SMALL[value]
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


_SMALL = [bytes((i,)) for i in range(0x80)]


def _tag(field: int, wire: int) -> bytes:
    return _varint((field << 3) | wire)


def _len(field: int, payload: bytes) -> bytes:
    """A length-delimited field."""
    n = len(payload)
    return _TAGS[field] + (_SMALL[n] if n < 0x80 else _varint(n)) + payload


_TAGS = [_tag(field, 2) if field else b"" for field in range(16)]  # length-delimited fields
# Attribute keys and short string values repeat from span to span: their encodings are kept
# (bounded: cleared when full).
_KEYS: dict[str, bytes] = {}
_STRINGS: dict[str, bytes] = {}
_CACHE_MAX = 4096


def _key(key: str) -> bytes:
    out = _KEYS.get(key)
    if out is None:
        if len(_KEYS) >= _CACHE_MAX:
            _KEYS.clear()
        out = _KEYS[key] = _len(1, key.encode())
    return out


def _any(value: Any) -> bytes:
    """An ``AnyValue``'s payload."""
    if value is None:
        return b""
    if isinstance(value, str):
        if len(value) > 64:
            return _len(1, value.encode())
        out = _STRINGS.get(value)
        if out is None:
            if len(_STRINGS) >= _CACHE_MAX:
                _STRINGS.clear()
            out = _STRINGS[value] = _len(1, value.encode())
        return out
    if isinstance(value, bool):
        return b"\x10\x01" if value else b"\x10\x00"
    if isinstance(value, int):
        return b"\x18" + _varint(value)
    if isinstance(value, float):
        return b"\x21" + _double(value)
    if isinstance(value, bytes):
        return _len(7, value)
    if isinstance(value, Sequence):
        return _len(5, b"".join([_len(1, _any(v)) for v in value]))
    if isinstance(value, Mapping):
        return _len(6, _key_values(1, value))
    raise TypeError(f"unsupported attribute value {type(value).__name__}")


def _key_values(field: int, attributes: Mapping[str, Any] | None) -> bytes:
    """``repeated KeyValue`` as field ``field``."""
    if not attributes:
        return b""
    return b"".join(
        [_len(field, _key(key) + _len(2, _any(value))) for key, value in attributes.items()]
    )


def _uint(field: int, value: int | None) -> bytes:
    return _tag(field, 0) + _varint(value) if value else b""


def _string(field: int, value: str | None) -> bytes:
    return _len(field, value.encode()) if value else b""


def _trace_state(state: Any) -> str | None:
    return ",".join(f"{k}={v}" for k, v in state.items()) if state else None


def _span(span: ReadableSpan) -> bytes:
    ctx = span.get_span_context()
    assert ctx is not None
    parent = span.parent
    flags = HAS_IS_REMOTE | (IS_REMOTE if parent is not None and parent.is_remote else 0)
    out = [
        _len(1, ctx.trace_id.to_bytes(16, "big")),
        _len(2, ctx.span_id.to_bytes(8, "big")),
        _string(3, _trace_state(ctx.trace_state)),
        _len(4, parent.span_id.to_bytes(8, "big")) if parent is not None else b"",
        _string(5, span.name),
        _uint(6, span.kind.value + 1),  # SpanKind: the SDK counts from INTERNAL = 0
        b"\x39" + _fixed64(span.start_time or 0) if span.start_time else b"",
        b"\x41" + _fixed64(span.end_time or 0) if span.end_time else b"",
        _key_values(9, span.attributes),
        _uint(10, span.dropped_attributes),
    ]
    for event in span.events:
        out.append(
            _len(
                11,
                (b"\x09" + _fixed64(event.timestamp) if event.timestamp else b"")
                + _string(2, event.name)
                + _key_values(3, event.attributes)
                + _uint(4, event.dropped_attributes),
            )
        )
    out.append(_uint(12, span.dropped_events))
    for link in span.links:
        lctx = link.context
        link_flags = HAS_IS_REMOTE | (IS_REMOTE if lctx.is_remote else 0)
        out.append(
            _len(
                13,
                _len(1, lctx.trace_id.to_bytes(16, "big"))
                + _len(2, lctx.span_id.to_bytes(8, "big"))
                + _key_values(4, link.attributes)
                + _uint(5, link.dropped_attributes)
                + b"\x35"
                + _fixed32(link_flags),
            )
        )
    out.append(_uint(14, span.dropped_links))
    status = span.status
    code = status.status_code.value if status is not None else 0
    message = status.description if status is not None else None
    out.append(_len(15, _string(2, message) + _uint(3, code)))
    out.append(b"\x85\x01" + _fixed32(flags))  # field 16, fixed32
    return b"".join(out)


def _resource(resource: Any) -> bytes:
    return _key_values(1, resource.attributes)


def _scope(scope: Any) -> bytes:
    return (
        _string(1, scope.name) + _string(2, scope.version) + _key_values(3, scope.attributes)
        if scope is not None
        else b""
    )


def encode_request(spans: Sequence[ReadableSpan]) -> bytes:
    """An ``ExportTraceServiceRequest``'s bytes: spans grouped by resource, then by scope."""
    grouped: dict[Any, dict[Any, list[bytes]]] = {}
    for span in spans:
        by_scope = grouped.setdefault(span.resource, {})
        by_scope.setdefault(span.instrumentation_scope or None, []).append(_span(span))
    out = []
    for resource, scopes in grouped.items():
        body = [_len(1, _resource(resource))]
        for scope, encoded in scopes.items():
            scope_body = _len(1, _scope(scope)) + b"".join(_len(2, s) for s in encoded)
            scope_body += _string(3, scope.schema_url if scope is not None else None)
            body.append(_len(2, scope_body))
        body.append(_string(3, resource.schema_url))
        out.append(_len(1, b"".join(body)))
    return b"".join(out)


class FastOTLPSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/HTTP span exporter with ``encode_request`` as its encoder; anything the
    fast path does not know (a change in the SDK's internals) falls back to the SDK's own."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        client = getattr(self, "_client", None)
        if client is None or getattr(self, "_shutdown", False):
            return super().export(spans)
        try:
            data = encode_request(spans)
        except Exception:
            return super().export(spans)
        result = client.export(data)
        return SpanExportResult.SUCCESS if result.success else SpanExportResult.FAILURE
