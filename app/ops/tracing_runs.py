"""Spans of a run's admission, its run store statements and its wait for approval.

Installed by ``start_tracing`` on the live objects, when tracing is on (off, nothing here runs):
``trace_runs`` replaces, on the ``RunManager`` instance, ``submit`` (the ``admission`` span; the
run's trace id and ``traceparent`` go into its ``options``: the run's JSON shows ``trace_id``)
and ``resume`` with ``on_approval_decided`` (the ``approval.wait`` span, from the pause to the
decision, in the run's own trace; the resumed turn is traced there too, the wait linked to the
request that resumed it); and, on the ``RunStore`` instance, the turn's statements
(``store.lookup``, ``store.admit``, ``store.start``, ``store.read``, ``store.load_memory``,
``store.store_end``). Every caller reaches them through those objects' attributes, so no
runtime module changes.
"""

from __future__ import annotations

import contextvars
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from opentelemetry import context, propagate, trace
from opentelemetry.trace import Link, Span, Tracer

from app.ops.tracing_agents import CONVERSATION, current, record_failure

STORE_OPERATIONS = ("lookup", "admit", "start", "read", "load_memory", "store_end")
# The admission span of this task's submit: ``store.admit`` is its child.
_admission: contextvars.ContextVar[Span | None] = contextvars.ContextVar(
    "agentstation_admission_span", default=None
)
# How long the run being resumed waited (``on_approval_decided``, just before ``resume``).
_waited: contextvars.ContextVar[float] = contextvars.ContextVar(
    "agentstation_approval_waited", default=0.0
)


def trace_id_of(span: Span) -> str:
    """A span's trace id as 32 hex digits."""
    return trace.format_trace_id(span.get_span_context().trace_id)


def trace_runs(runs: Any, tracer: Tracer) -> None:
    """Trace ``runs`` (a ``RunManager``): admission, approval waits and its run store."""
    _trace_store(runs.store, tracer)
    submit = runs.submit
    resume = runs.resume
    decided = runs.on_approval_decided

    async def traced_submit(sub: Any, lease: Any, inline: bool = False) -> Any:
        request = trace.get_current_span()
        carrier: dict[str, str] = {}
        propagate.inject(carrier)  # the request's context: a resumed turn continues it
        attributes = {CONVERSATION: sub.session.id, "gen_ai.agent.name": sub.agent_name}
        span = tracer.start_span("admission", attributes=attributes)
        token = _admission.set(span)
        try:
            if request.get_span_context().is_valid:
                sub.options = {
                    **(sub.options or {}),
                    "trace_id": trace_id_of(request),
                    **({"traceparent": carrier["traceparent"]} if "traceparent" in carrier else {}),
                }
            run, created = await submit(sub, lease, inline)
            span.set_attributes(  # one call: each set alone takes the span's lock and a clean
                {
                    "agentstation.run.id": run.id,
                    "agentstation.run.created": created,
                    "agentstation.run.status": str(run.status),
                }
            )
            return run, created
        except BaseException as exc:
            record_failure(span, exc)
            raise
        finally:
            _admission.reset(token)
            span.end()

    def traced_resume(
        run: Any, spec: Any, resumption: Any, events: Any, inline: bool = False
    ) -> Any:
        stored = (run.options or {}).get("traceparent")
        here = trace.get_current_span().get_span_context()
        parent = propagate.extract({"traceparent": stored}) if stored else context.get_current()
        calls = getattr(getattr(resumption, "pending", None), "calls", [])
        wait = tracer.start_span(
            "approval.wait",
            context=parent,
            start_time=time.time_ns() - int(_waited.get() * 1e9),
            links=[Link(here)] if stored and here.is_valid else None,
            attributes={
                CONVERSATION: run.session_id,
                "agentstation.run.id": run.id,
                "gen_ai.tool.name": [str(c.name) for c in calls],
                "gen_ai.tool.call.id": [str(c.id) for c in calls],
                "agentstation.approval.decisions": [
                    str(d.action) for d in getattr(resumption, "decisions", {}).values()
                ],
            },
        )
        wait.end()
        # The resumed turn's task copies this context: its spans join the run's trace.
        with current(parent):
            return resume(run, spec, resumption, events, inline)

    def traced_decided(waited_s: float, outcome: str) -> None:
        # Called just before ``resume`` (services/approvals.py), in the same task: the wait's
        # length for its span.
        _waited.set(waited_s)
        decided(waited_s, outcome)

    runs.submit = traced_submit
    runs.resume = traced_resume
    runs.on_approval_decided = traced_decided


def _trace_store(store: Any, tracer: Tracer) -> None:
    system = "postgresql" if "Pg" in type(store).__name__ else "sqlite"
    for name in STORE_OPERATIONS:
        method = getattr(store, name, None)
        if method is not None:
            setattr(store, name, _traced(method, f"store.{name}", system, tracer))


def _traced(
    method: Callable[..., Awaitable[Any]], name: str, system: str, tracer: Tracer
) -> Callable[..., Awaitable[Any]]:
    attributes = {"db.system.name": system, "db.operation.name": name.partition(".")[2]}

    @functools.wraps(method)
    async def traced(*args: Any, **kwargs: Any) -> Any:
        admission = _admission.get() if name == "store.admit" else None
        parent = trace.set_span_in_context(admission) if admission is not None else None
        # Never made current: a statement has no child spans, and ``start_as_current_span``
        # costs a context manager, an attach and a detach more per statement.
        span = tracer.start_span(name, context=parent, attributes=attributes)
        try:
            return await method(*args, **kwargs)
        except BaseException as exc:
            record_failure(span, exc)
            raise
        finally:
            span.end()

    return traced


__all__ = ["STORE_OPERATIONS", "trace_id_of", "trace_runs"]
