"""OpenTelemetry tracing, configured by the standard ``OTEL_*`` variables; off unless set.

On when ``OTEL_EXPORTER_OTLP_ENDPOINT`` (or ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``) is set, or
``OTEL_TRACES_EXPORTER`` names an exporter (``otlp``, ``console``); off with
``OTEL_SDK_DISABLED=true`` or ``OTEL_TRACES_EXPORTER=none``. Off, nothing of OpenTelemetry is
imported or created: the middleware is not installed, and the hook points (``agents/tracing.py``,
``InstrumentedLLM``, the run manager's and run store's methods) stay as they are.

On, every request gets a server span (continuing a client's W3C ``traceparent``), and
``start_tracing`` wires the rest (``app/ops/tracing_agents.py``, ``app/ops/tracing_runs.py``).
The SDK reads the rest of its settings itself: ``OTEL_SERVICE_NAME``,
``OTEL_RESOURCE_ATTRIBUTES``, ``OTEL_TRACES_SAMPLER`` (+ ``_ARG``), ``OTEL_EXPORTER_OTLP_*``
(endpoint, protocol, headers, timeout), ``OTEL_BSP_*`` (the batch processor). docs/observability.md.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.ops.metrics import route_template

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

    from app.state import AppState

TRACER_NAME = "agentstation"
_TRUE = ("1", "true", "yes", "on")


def tracing_configured(env: Mapping[str, str] | None = None) -> bool:
    """Whether the ``OTEL_*`` variables ask for traces (see the module's docstring)."""
    env = os.environ if env is None else env
    if env.get("OTEL_SDK_DISABLED", "").strip().lower() in _TRUE:
        return False
    exporters = env.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if exporters:
        return exporters != "none"
    return bool(
        env.get("OTEL_EXPORTER_OTLP_ENDPOINT") or env.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    )


def capture_content(env: Mapping[str, str] | None = None) -> bool:
    """``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=true``: spans carry messages."""
    env = os.environ if env is None else env
    value = env.get("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "")
    return value.strip().lower() in _TRUE


@dataclass
class Tracing:
    """The SDK's provider and this service's tracer (``app.state.tracing`` when on)."""

    provider: TracerProvider
    tracer: Tracer
    capture_content: bool

    def shutdown(self) -> None:
        """Export what is pending and stop the exporters."""
        self.provider.shutdown()


def _exporters(env: Mapping[str, str]) -> list[Any]:
    chosen = env.get("OTEL_TRACES_EXPORTER", "").strip() or "otlp"  # set but empty: the default
    names = [n.strip() for n in chosen.lower().split(",") if n.strip()]
    exporters: list[Any] = []
    for name in names:
        if name == "console":
            from opentelemetry.sdk.trace.export import ConsoleSpanExporter

            exporters.append(ConsoleSpanExporter())
        elif name == "otlp":
            protocol = env.get("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env.get(
                "OTEL_EXPORTER_OTLP_PROTOCOL", ""
            )
            if protocol.strip().lower() == "grpc":
                from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                    OTLPSpanExporter as GrpcExporter,
                )

                exporters.append(GrpcExporter())
            else:
                from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                    OTLPSpanExporter as HttpExporter,
                )

                exporters.append(HttpExporter())
        elif name != "none":
            raise ValueError(f"OTEL_TRACES_EXPORTER: unknown exporter {name!r} (otlp|console)")
    return exporters


def _hashed_resource(attributes: Any, schema_url: str | None) -> Any:
    """The SDK's ``Resource`` with its hash computed once.

    The OTLP exporter groups each batch's spans by resource (``encode_spans``: a dict keyed by
    ``span.resource``), and ``Resource.__hash__`` JSON-encodes the resource's attributes every
    time: ≈ 6.6 µs per exported span, a sixth of the encoder's cost per span here. A resource
    is immutable (its attributes are frozen at creation), so the hash can be kept; equality and
    everything else stay the SDK's.
    """
    from opentelemetry.sdk.resources import Resource

    class HashedResource(Resource):
        def __init__(self, attributes: Any, schema_url: str | None = None) -> None:
            super().__init__(attributes, schema_url)
            self._hash = super().__hash__()

        def __hash__(self) -> int:
            return self._hash

    return HashedResource(attributes, schema_url)


def setup_tracing(env: Mapping[str, str] | None = None) -> Tracing | None:
    """A provider with batch exporters as the ``OTEL_*`` variables say; None when off."""
    env = os.environ if env is None else env
    if not tracing_configured(env):
        return None
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    defaults = {} if env.get("OTEL_SERVICE_NAME") else {"service.name": "agentstation"}
    created = Resource.create(defaults)  # + OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES
    # The sampler comes from OTEL_TRACES_SAMPLER (parentbased_always_on by default).
    provider = TracerProvider(resource=_hashed_resource(created.attributes, created.schema_url))
    for exporter in _exporters(env):
        provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer(TRACER_NAME)
    return Tracing(provider, tracer, capture_content(env))


class TracingMiddleware:
    """One server span per HTTP request, a child of the client's ``traceparent`` if sent;
    current while the app handles it (a run started by the request is in its trace)."""

    def __init__(self, app: ASGIApp, tracing: Tracing) -> None:
        from opentelemetry import context, propagate, trace

        self.app = app
        self.tracer = tracing.tracer
        self._context = context
        self._propagate = propagate
        self._trace = trace

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        trace = self._trace
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope["headers"]
            if k in (b"traceparent", b"tracestate", b"baggage")
        }
        parent = self._propagate.extract(carrier) if carrier else None
        method = scope["method"]
        span = self.tracer.start_span(
            method,
            context=parent,
            kind=trace.SpanKind.SERVER,
            attributes={"http.request.method": method, "url.path": scope["path"]},
        )
        status = 500

        def send_wrapper(message: Message) -> Awaitable[None]:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        # Sampled out: the span keeps nothing, so neither the status nor the route is taken.
        recording = span.is_recording()
        token = self._context.attach(trace.set_span_in_context(span, parent))
        try:
            await self.app(scope, receive, send_wrapper if recording else send)
        except Exception as exc:
            span.record_exception(exc)
            raise
        finally:
            self._context.detach(token)
            if recording:
                route = route_template(scope)
                span.update_name(f"{method} {route}")
                # One call: each attribute set alone costs a lock and a check in the SDK.
                ended: dict[str, Any] = {"http.route": route, "http.response.status_code": status}
                if status >= 500:
                    span.set_status(trace.Status(trace.StatusCode.ERROR))
                    ended["error.type"] = str(status)
                span.set_attributes(ended)
            span.end()


def start_tracing(state: AppState, tracing: Tracing) -> Callable[[], None]:
    """Lifespan part: trace agents, model calls, admissions and the run store; returns the
    closer (flushes the exporter)."""
    from agents import tracing as agent_tracing
    from app.ops.instrument import InstrumentedLLM, InstrumentedRaw
    from app.ops.tracing_agents import AgentTracer
    from app.ops.tracing_runs import trace_runs

    sampler = getattr(tracing.provider, "sampler", None)
    parent_based = type(sampler).__name__.startswith("ParentBased")
    tracer = AgentTracer(tracing.tracer, tracing.capture_content, parent_based)
    agent_tracing.install(tracer)
    for handle in state.models.handles.values():
        if isinstance(handle.llm, InstrumentedLLM):
            handle.llm.trace(tracer)
        if isinstance(handle.raw, InstrumentedRaw):  # raw /v1/chat/completions requests
            handle.raw.trace(tracer)
    if state.runs is not None:
        trace_runs(state.runs, tracing.tracer)

    def close() -> None:
        agent_tracing.install(None)
        tracing.shutdown()

    return close


__all__ = [
    "TRACER_NAME",
    "Tracing",
    "TracingMiddleware",
    "capture_content",
    "setup_tracing",
    "start_tracing",
    "tracing_configured",
]
