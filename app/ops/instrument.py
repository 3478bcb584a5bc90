"""Hooks the runtime's live objects into ops: model calls (TTFT, tokens), gauges.

(Token budgets are not here: the model call itself checks them, see app/ops/budget.py.)"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, Protocol

from agents.llms.base import AsyncBaseLLM, LLMDelta, Messages, Usage
from app.ops.metrics import Metrics
from app.schemas.vocab import WAITING

log = logging.getLogger("agentstation.runs")


class ChatTracer(Protocol):
    """Opens a model call's span (``app/ops/tracing_agents.py: AgentTracer.chat``)."""

    def chat(
        self,
        model: str,
        provider: str,
        messages: Messages,
        params: dict[str, Any],
        stream: Callable[[], AsyncIterator[LLMDelta]],
    ) -> AsyncIterator[LLMDelta]: ...


class RawTracer(Protocol):
    """Opens a raw model request's span (``app/ops/tracing_agents.py: AgentTracer``)."""

    async def raw_chat(
        self,
        model: str,
        provider: str,
        request: dict[str, Any],
        call: Callable[[], Awaitable[dict[str, Any]]],
    ) -> dict[str, Any]: ...

    def raw_stream(
        self,
        model: str,
        provider: str,
        request: dict[str, Any],
        stream: Callable[[], AsyncIterator[dict[str, Any]]],
    ) -> AsyncIterator[dict[str, Any]]: ...


class _ModelMetrics:
    """A model call's TTFT and usage into the metrics (``AsyncBaseLLM``'s ``StreamWatcher``)."""

    def __init__(self, metrics: Metrics, model: str, provider: str) -> None:
        self.metrics = metrics
        self.model = model
        self.provider = provider

    def first_text(self, seconds: float) -> None:
        self.metrics.time_to_first_token(self.model, seconds, self.provider)

    def usage(self, usage: Usage) -> None:
        self.metrics.tokens(self.model, usage.prompt_tokens, usage.completion_tokens, self.provider)


class InstrumentedLLM(AsyncBaseLLM):
    """A model that records TTFT and usage per call; otherwise the same model."""

    def __init__(
        self, inner: AsyncBaseLLM, model: str, metrics: Metrics, provider: str = ""
    ) -> None:
        # No super().__init__: parameters and template stay the inner model's own objects.
        self.inner = inner
        self.model = model
        self.metrics = metrics
        self.provider = provider or model  # its backend (gen_ai.provider.name)
        # Tracing's chat spans (app/ops/tracing_agents.py), set by ``trace``; None: off.
        self.tracer: ChatTracer | None = None
        self._watcher = _ModelMetrics(metrics, model, self.provider)

    def trace(self, tracer: ChatTracer | None) -> None:
        """Open a ``chat {model}`` span per call with ``tracer`` (None: no spans)."""
        self.tracer = tracer

    def __getattr__(self, name: str) -> Any:
        # Anything not defined here (path, gen_params, meta_template, backend extras).
        return getattr(self.inner, name)

    def update_gen_params(self, **kwargs: Any) -> dict[str, Any]:
        """The inner model's per-call parameters."""
        return self.inner.update_gen_params(**kwargs)

    def astream(self, messages: Messages, **kwargs: Any) -> AsyncIterator[LLMDelta]:
        """Stream the inner model (which runs the call guards: budgets), recording its
        first-token time and usage; in a ``chat`` span when tracing is on."""
        tracer = self.tracer
        if tracer is None:
            return self._measured(messages, kwargs)
        params = self.inner.update_gen_params(**kwargs)
        return tracer.chat(
            self.model, self.provider, messages, params, lambda: self._measured(messages, kwargs)
        )

    def _measured(self, messages: Messages, kwargs: dict[str, Any]) -> AsyncIterator[LLMDelta]:
        """The inner stream, its first-token time and usage recorded: by the inner model's
        own stream when it is ``AsyncBaseLLM``'s (``watched_stream``: no generator of this
        wrapper for every delta to pass through, issue 25), else by ``_wrapped``."""
        inner = self.inner
        if type(inner).astream is AsyncBaseLLM.astream:
            return inner.watched_stream(messages, kwargs, self._watcher)
        return self._wrapped(messages, kwargs)

    async def _wrapped(self, messages: Messages, kwargs: dict[str, Any]) -> AsyncIterator[LLMDelta]:
        start = time.perf_counter()
        first = True
        metrics, model, provider = self.metrics, self.model, self.provider
        async for delta in self.inner.astream(messages, **kwargs):
            if first and delta.text:
                first = False
                metrics.time_to_first_token(model, time.perf_counter() - start, provider)
            if delta.usage is not None:
                usage = delta.usage
                metrics.tokens(model, usage.prompt_tokens, usage.completion_tokens, provider)
            yield delta

    async def chat(self, messages: Messages, **kwargs: Any) -> str:
        """The inner model's whole reply (through ``astream``)."""
        return "".join([d.text async for d in self.astream(messages, **kwargs)])

    async def stream_chat(self, messages: Messages, **kwargs: Any) -> AsyncIterator[str]:
        """The inner model's text deltas (through ``astream``)."""
        async for delta in self.astream(messages, **kwargs):
            if delta.text:
                yield delta.text


class InstrumentedRaw:
    """A raw OpenAI chat backend that records TTFT and usage (when the engine reports it)."""

    def __init__(self, inner: Any, model: str, metrics: Metrics, provider: str = "") -> None:
        self.inner = inner
        self.model = model
        self.metrics = metrics
        self.provider = provider or model
        self.tracer: RawTracer | None = None  # tracing's chat spans; None: off

    def trace(self, tracer: RawTracer | None) -> None:
        """Open a ``chat {model}`` span per request with ``tracer`` (None: no spans)."""
        self.tracer = tracer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def complete(self, request: dict[str, Any]) -> dict[str, Any]:
        """The inner completion; its usage is counted (in a ``chat`` span when tracing)."""
        if self.tracer is not None:
            return await self.tracer.raw_chat(
                self.model, self.provider, request, lambda: self._complete(request)
            )
        response: dict[str, Any] = await self.inner.complete(request)  # _complete, inlined
        self._usage(response.get("usage"))
        return response

    async def _complete(self, request: dict[str, Any]) -> dict[str, Any]:
        response: dict[str, Any] = await self.inner.complete(request)
        self._usage(response.get("usage"))
        return response

    def stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        """The inner chunks; the first content chunk's time and any usage are recorded (in a
        ``chat`` span when tracing)."""
        if self.tracer is not None:
            return self.tracer.raw_stream(
                self.model, self.provider, request, lambda: self._stream(request)
            )
        return self._stream(request)

    async def _stream(self, request: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        start = time.perf_counter()
        first = True
        async for chunk in self.inner.stream(request):
            if first and any(
                (c.get("delta") or {}).get("content") for c in chunk.get("choices") or []
            ):
                first = False
                self.metrics.time_to_first_token(
                    self.model, time.perf_counter() - start, self.provider
                )
            self._usage(chunk.get("usage"))
            yield chunk

    def _usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            prompt = int(usage.get("prompt_tokens") or 0)
            completion = int(usage.get("completion_tokens") or 0)
            self.metrics.tokens(self.model, prompt, completion, self.provider)


def instrument_models(
    handles: dict[str, Any], metrics: Metrics, providers: Mapping[str, str] | None = None
) -> None:
    """Wrap each handle's ``llm`` and ``raw`` in place (agents built afterwards use them);
    ``providers``: each model's backend (the GenAI metrics' ``gen_ai_provider_name``)."""
    for name, handle in handles.items():
        provider = (providers or {}).get(name, "")
        if not isinstance(handle.llm, InstrumentedLLM):
            handle.llm = InstrumentedLLM(handle.llm, name, metrics, provider)
        if not isinstance(handle.raw, InstrumentedRaw):
            handle.raw = InstrumentedRaw(handle.raw, name, metrics, provider)


def kernel_counts(kernels: list[Any]) -> dict[str, int]:
    """Kernels by state: busy, idle or dead."""
    counts = Counter(
        "dead" if not getattr(k, "alive", True) else "busy" if getattr(k, "busy", False) else "idle"
        for k in kernels
    )
    return {state: counts.get(state, 0) for state in ("busy", "idle", "dead")}


def sample_kernel_pool(metrics: Metrics, pool: Any) -> None:
    """Set the kernel and isolation-level gauges from a kernel pool (call at scrape time)."""
    if pool.level is not None:
        metrics.set_sandbox_level(str(pool.level))
    # list() copies at once: the pool mutates its dict from its own thread.
    metrics.set_kernels(kernel_counts(list(pool.kernels.values())))


def observe_runs(
    metrics: Metrics, jobs: Callable[[], list[Any]], kernel_sessions: Callable[[], set[str]]
) -> None:
    """Sample queued/active runs, and sessions with a run or a live kernel, at each scrape."""

    def sample() -> None:
        current = jobs()
        running = sum(1 for job in current if getattr(job, "started", True))
        metrics.set_queue_depth(len(current) - running, active=running)
        sessions = {job.session_key for job in current} | kernel_sessions()
        metrics.set_active_sessions(len(sessions))

    metrics.add_sampler(sample)


def record_run(metrics: Metrics, run: Any) -> None:
    """Count a finished run, time it, and log one line about it (in the run's context)."""
    start = run.started_at or run.created_at
    duration = (run.finished_at - start).total_seconds() if run.finished_at and start else 0.0
    if run.status not in WAITING:  # waiting for a person is not an end (see approvals)
        metrics.run_finished(run.status, duration)
    log.info(
        "run %s %s (%s) in %.2fs",
        run.id,
        run.status,
        run.stop_reason,
        duration,
        extra={
            "status": run.status,
            "stop_reason": run.stop_reason,
            "duration_s": round(duration, 3),
            "prompt_tokens": run.prompt_tokens,
            "completion_tokens": run.completion_tokens,
        },
    )
