"""The agents library's tracing hook points: off unless a host installs a ``Tracer``.

``TRACER`` is None by default, and then every hook point costs one module-attribute read and
creates nothing. A host (AgentStation: ``app/ops/tracing.py``, when the ``OTEL_*`` variables
configure OpenTelemetry) installs an implementation with ``install``; the library never imports
a tracing SDK itself. The hook points:

- ``BaseAgent._stream`` (``agents/agent.py``): every agent turn, sub-agents and task members
  included, through ``Tracer.agent`` (an ``invoke_agent`` span around the turn's stream);
- ``_Executor.acall`` (``agents/actions/executor.py``): every tool call, through ``Tracer.tool``
  (an ``execute_tool`` span);
- ``KernelPool.execute`` (``agents/sandbox/pool.py``): a kernel cell, through ``Tracer.span``;
- outgoing requests to remote A2A agents (``agents/remote.py``), MCP servers
  (``agents/actions/mcp.py``) and OpenAI-compatible servers (``agents/llms/openai_client.py``):
  ``outgoing_headers`` adds the trace context (W3C ``traceparent``) to their headers (MCP: to
  the call's ``_meta``); ``MCPConnection.call`` (``agents/actions/mcp_conn.py``) runs a call in
  its caller's context, so the SDK's own ``_meta`` injection names the caller's span.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractContextManager
from typing import Any, Protocol, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class SpanLike(Protocol):
    """What a hook point may record on a span it got from ``Tracer.span``."""

    def set_attribute(self, key: str, value: Any) -> None: ...


class Tracer(Protocol):
    """What a host implements to trace agents (see the module's docstring)."""

    def agent(self, agent: Any, session_id: Any, stream: AsyncIterator[T]) -> AsyncIterator[T]:
        """``stream`` (one turn of ``agent``) inside the agent's span."""
        ...

    def tool(
        self, name: str, arguments: Any, call_id: str | None, call: Callable[[], Awaitable[R]]
    ) -> Awaitable[R]:
        """``await call()`` (one tool call) inside the tool's span."""
        ...

    def span(self, name: str, attributes: dict[str, Any]) -> AbstractContextManager[SpanLike]:
        """A plain span (e.g. a kernel cell) around a block."""
        ...

    def headers(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus the current trace context (a new dict)."""
        ...


TRACER: Tracer | None = None


def install(tracer: Tracer | None) -> None:
    """Trace agents with ``tracer`` from now on (None: stop tracing)."""
    global TRACER
    TRACER = tracer


def outgoing_headers(headers: dict[str, str]) -> dict[str, str]:
    """``headers`` as they are when tracing is off, else a copy with the trace context."""
    tracer = TRACER
    return headers if tracer is None else tracer.headers(headers)


__all__ = ["TRACER", "SpanLike", "Tracer", "install", "outgoing_headers"]
