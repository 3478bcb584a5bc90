"""The fast OTLP encoder (app/ops/otlp_encode.py) writes byte for byte what the SDK's encoder
writes, for every kind of span, attribute value, event, link, status and parent; and the
exporter built on it delivers spans a real OTLP receiver parses."""

from __future__ import annotations

from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Link, SpanContext, SpanKind, Status, StatusCode, TraceFlags
from opentelemetry.trace.span import TraceState

from app.ops.otlp_encode import encode_request


def _spans() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "t", "n": 3}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agentstation", "1.2", schema_url="https://x/s")
    other = provider.get_tracer("other")
    remote = SpanContext(
        0x0AF7651916CD43DD8448EB211C80319C,
        0xB7AD6B7169203331,
        is_remote=True,
        trace_flags=TraceFlags(1),
        trace_state=TraceState([("vendor", "v1"), ("k", "v")]),
    )
    parent = trace.set_span_in_context(trace.NonRecordingSpan(remote))
    values = {
        "s": "text é", "b": True, "f": False, "i": 42, "neg": -7, "big": 2**62, "d": 0.25,
        "strs": ["a", "b"], "ints": [1, -2], "floats": [0.5], "bools": [True, False],
        "empty": "",
    }  # fmt: skip
    with tracer.start_as_current_span("POST /x", context=parent, kind=SpanKind.SERVER) as root:
        root.set_attributes(values)
        for kind in SpanKind:
            with tracer.start_as_current_span(f"k {kind.name}", kind=kind) as child:
                child.add_event("gen_ai.first_token", {"gen_ai.server.time_to_first_token": 0.1})
                child.add_event("bare")
        with other.start_as_current_span("linked", links=[Link(remote, {"why": "resume"})]) as s:
            s.set_status(Status(StatusCode.ERROR, "it broke"))
            s.record_exception(ValueError("boom"))
        with tracer.start_as_current_span("ok") as s:
            s.set_status(Status(StatusCode.OK))
    with tracer.start_as_current_span("a root of its own"):
        pass
    return list(memory.get_finished_spans())


def test_the_fast_encoder_writes_what_the_sdks_encoder_writes() -> None:
    spans = _spans()
    assert len(spans) == 9  # the root, 5 kinds, linked, ok, another root
    assert encode_request(spans) == encode_spans(spans).SerializePartialToString()
    for span in spans:  # one at a time too (a batch of one resource and scope)
        assert encode_request([span]) == encode_spans([span]).SerializePartialToString()
    parsed = ExportTraceServiceRequest.FromString(encode_request(spans))
    names = {s.name for rs in parsed.resource_spans for ss in rs.scope_spans for s in ss.spans}
    assert "linked" in names and "POST /x" in names
