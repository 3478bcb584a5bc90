"""Prometheus metrics: one registry per app, small recording calls, a cheap pure-ASGI middleware."""

from __future__ import annotations

import logging
import time
from bisect import bisect_left
from collections.abc import Awaitable, Callable, Mapping
from threading import get_ident
from typing import Any

from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    PlatformCollector,
    ProcessCollector,
    generate_latest,
)
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from app.ops.metric_cells import OTHERS, OWNER, Cells, CounterFamily, HistogramFamily, Writers

log = logging.getLogger(__name__)

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)
_RUN_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)
# Waits for a person: seconds to a week.
_APPROVAL_BUCKETS = (1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 86400, 7 * 86400)
_TTFT_BUCKETS = (0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30)
# The GenAI semantic conventions' advised buckets for their two metrics.
_GENAI_TOKEN_BUCKETS = (
    1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304, 16777216, 67108864,
)  # fmt: skip
_GENAI_TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
)  # fmt: skip
# gen_ai.* attributes as Prometheus labels (dots become underscores, as OpenTelemetry maps them).
_GENAI_LABELS = ["gen_ai_operation_name", "gen_ai_provider_name", "gen_ai_request_model"]
UNMATCHED_ROUTE = "<unmatched>"  # 404s: one label value instead of one per random path
SANDBOX_LEVELS = ("L0", "L1", "L3")
_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})


class Metrics:
    """All AgentStation metrics on a private registry; the runtime calls the small methods.

    The per-request ones (HTTP requests and latency, tokens, TTFT) are plain floats
    (``app/ops/metric_cells.py``): the thread ``writers`` bound (the event loop's, claimed by
    ``MetricsMiddleware``) updates them without a lock, any other thread under
    ``writers.lock``. The rest are prometheus_client's own metrics."""

    def __init__(self, registry: CollectorRegistry | None = None, process: bool = True) -> None:
        reg = self.registry = registry or CollectorRegistry()
        self.writers = w = Writers()
        if process:
            ProcessCollector(registry=reg)
            PlatformCollector(registry=reg)
        self.http_requests = CounterFamily(
            w,
            "agentstation_http_requests",
            "HTTP requests by method, route template and status.",
            ["method", "route", "status"],
            reg,
        )
        self.http_latency = HistogramFamily(
            w,
            "agentstation_http_request_duration_seconds",
            "HTTP request duration until the response is complete (streams included).",
            ["method", "route"],
            reg,
            buckets=_LATENCY_BUCKETS,
        )
        self.http_in_flight = Gauge(
            "agentstation_http_requests_in_flight", "HTTP requests being served.", registry=reg
        )
        self.rate_limited = Counter(
            "agentstation_rate_limited_requests", "Requests rejected with 429.", registry=reg
        )
        self.runs = Counter(
            "agentstation_runs", "Finished runs by final status.", ["status"], registry=reg
        )
        self.run_duration = Histogram(
            "agentstation_run_duration_seconds",
            "Run duration from start to its final status.",
            ["status"],
            buckets=_RUN_BUCKETS,
            registry=reg,
        )
        self.budget_exceeded = Counter(
            "agentstation_budget_exceeded",
            "Runs stopped or refused by a token budget, by scope (session|tenant).",
            ["scope"],
            registry=reg,
        )
        self.ttft = HistogramFamily(
            w,
            "agentstation_time_to_first_token_seconds",
            "Time from a model call to its first token, per model.",
            ["model"],
            reg,
            buckets=_TTFT_BUCKETS,
        )
        self.tokens_total = CounterFamily(
            w,
            "agentstation_tokens",
            "Tokens processed per model and kind (prompt|completion).",
            ["model", "kind"],
            reg,
        )
        # OpenTelemetry's GenAI metrics, named as its Prometheus mapping names them:
        # gen_ai.client.token.usage ({token}) and gen_ai.server.time_to_first_token (s).
        self.genai_token_usage = HistogramFamily(
            w,
            "gen_ai_client_token_usage",
            "Tokens per model call by type (gen_ai.client.token.usage: input|output).",
            [*_GENAI_LABELS, "gen_ai_token_type"],
            reg,
            buckets=_GENAI_TOKEN_BUCKETS,
        )
        self.genai_ttft = HistogramFamily(
            w,
            "gen_ai_server_time_to_first_token_seconds",
            "Time from a model call to its first token (gen_ai.server.time_to_first_token).",
            _GENAI_LABELS,
            reg,
            buckets=_GENAI_TTFT_BUCKETS,
        )
        self.queue_depth = Gauge(
            "agentstation_runs_queued", "Runs waiting for their session.", registry=reg
        )
        self.runs_active = Gauge("agentstation_runs_active", "Runs executing now.", registry=reg)
        self.approvals_waiting = Gauge(
            "agentstation_runs_waiting_approval",
            "Runs waiting for a person's decision about tool calls (status requires_action), "
            "on every replica (as of the last approval timeout check).",
            registry=reg,
        )
        self.approval_wait = Histogram(
            "agentstation_approval_wait_seconds",
            "How long a run waited for a decision, by outcome (resumed|timeout_cancelled).",
            ["outcome"],
            buckets=_APPROVAL_BUCKETS,
            registry=reg,
        )
        self.active_sessions = Gauge(
            "agentstation_active_sessions",
            "Sessions with a run in progress or a live kernel.",
            registry=reg,
        )
        self.kernels = Gauge(
            "agentstation_kernels", "Sandboxed kernels by state.", ["state"], registry=reg
        )
        self.sandbox_level = Gauge(
            "agentstation_sandbox_level",
            "Active sandbox isolation level (1 for the active one).",
            ["level"],
            registry=reg,
        )
        self.db_pool = Gauge(
            "agentstation_db_pool_connections",
            "Database pool connections by state (size|checked_out|overflow).",
            ["state"],
            registry=reg,
        )
        self._samplers: list[Callable[[], None]] = []
        # Each call's cells by its key, one dict per writer (``OWNER``, ``OTHERS``): a model's
        # (prompt counter, completion counter, input histogram, output histogram), its two
        # TTFT histograms, a request's (counter, latency histogram) by (method, route, status).
        self._tokens: tuple[dict[str, tuple[Cells, ...]], ...] = ({}, {})
        self._ttft: tuple[dict[str, tuple[Cells, Cells]], ...] = ({}, {})
        self._http: tuple[dict[tuple[str, str, int], tuple[Cells, Cells]], ...] = ({}, {})
        self._latency_bounds = self.http_latency.bounds
        self._token_bounds = self.genai_token_usage.bounds
        self._ttft_bounds = self.ttft.bounds
        self._genai_ttft_bounds = self.genai_ttft.bounds

    # --- calls for the runtime ---------------------------------------------------------------

    def approval_decided(self, waited_s: float, outcome: str) -> None:
        """A run that waited for approval was decided about after ``waited_s``."""
        self.approval_wait.labels(outcome).observe(max(0.0, waited_s))

    def run_finished(self, status: str, duration_s: float) -> None:
        """Count a run that reached a final status and record how long it took."""
        self.runs.labels(status).inc()
        self.run_duration.labels(status).observe(max(0.0, duration_s))

    # The three per-request recorders below update cells in place, with no call but
    # ``get_ident`` and ``bisect_left`` (a cache miss: ``KeyError``, once per key and thread):
    # on the owner thread without a lock, on any other under ``writers.lock``.

    def tokens(self, model: str, prompt: int, completion: int, provider: str = "") -> None:
        """Add one model call's token usage (``provider``: the model's backend; the labels
        keep the provider of the model's first call)."""
        if prompt < 0 or completion < 0:  # as Counter.inc refuses them
            raise ValueError("Counters can only be incremented by non-negative amounts.")
        writers = self.writers
        mine = get_ident() == writers.owner
        if not mine:
            writers.lock.acquire()
        try:
            shard = OWNER if mine else OTHERS
            try:
                cells = self._tokens[shard][model]
            except KeyError:
                cells = self._token_cells(shard, model, provider)
            cells[0][0] += prompt
            cells[1][0] += completion
            bounds = self._token_bounds
            usage = cells[2]
            usage[bisect_left(bounds, prompt)] += 1.0
            usage[-1] += prompt
            usage = cells[3]
            usage[bisect_left(bounds, completion)] += 1.0
            usage[-1] += completion
        finally:
            if not mine:
                writers.lock.release()

    def _token_cells(self, shard: int, model: str, provider: str) -> tuple[Cells, ...]:
        genai = ("chat", provider or model, model)
        cells = self._tokens[shard][model] = (
            self.tokens_total.cells(shard, (model, "prompt")),
            self.tokens_total.cells(shard, (model, "completion")),
            self.genai_token_usage.cells(shard, (*genai, "input")),
            self.genai_token_usage.cells(shard, (*genai, "output")),
        )
        return cells

    def time_to_first_token(self, model: str, seconds: float, provider: str = "") -> None:
        """Record the time from a model call to its first token (negative or NaN: 0)."""
        if not seconds > 0.0:
            seconds = 0.0
        writers = self.writers
        mine = get_ident() == writers.owner
        if not mine:
            writers.lock.acquire()
        try:
            shard = OWNER if mine else OTHERS
            try:
                ttft_cells = self._ttft[shard][model]
            except KeyError:
                ttft_cells = self._ttft_cells(shard, model, provider)
            ttft = ttft_cells[0]
            ttft[bisect_left(self._ttft_bounds, seconds)] += 1.0
            ttft[-1] += seconds
            ttft = ttft_cells[1]
            ttft[bisect_left(self._genai_ttft_bounds, seconds)] += 1.0
            ttft[-1] += seconds
        finally:
            if not mine:
                writers.lock.release()

    def _ttft_cells(self, shard: int, model: str, provider: str) -> tuple[Cells, Cells]:
        cells = self._ttft[shard][model] = (
            self.ttft.cells(shard, (model,)),
            self.genai_ttft.cells(shard, ("chat", provider or model, model)),
        )
        return cells

    def http_request(self, method: str, route: str, status: int, seconds: float) -> None:
        """Count one finished HTTP request and record its duration."""
        writers = self.writers
        mine = get_ident() == writers.owner
        if not mine:
            writers.lock.acquire()
        try:
            shard = OWNER if mine else OTHERS
            key = (method, route, status)
            try:
                http_cells = self._http[shard][key]
            except KeyError:
                http_cells = self._http_cells(shard, key)
            http_cells[0][0] += 1.0
            latency = http_cells[1]
            latency[bisect_left(self._latency_bounds, seconds)] += 1.0
            latency[-1] += seconds
        finally:
            if not mine:
                writers.lock.release()

    def _http_cells(self, shard: int, key: tuple[str, str, int]) -> tuple[Cells, Cells]:
        method, route, status = key
        cells = self._http[shard][key] = (
            self.http_requests.cells(shard, (method, route, str(status))),
            self.http_latency.cells(shard, (method, route)),
        )
        return cells

    def set_queue_depth(self, queued: int, active: int | None = None) -> None:
        """Set how many runs wait (and, optionally, how many execute)."""
        self.queue_depth.set(queued)
        if active is not None:
            self.runs_active.set(active)

    def set_active_sessions(self, count: int) -> None:
        """Set the number of sessions with a run in progress or a live kernel."""
        self.active_sessions.set(count)

    def set_kernels(self, by_state: Mapping[str, int]) -> None:
        """Set kernel counts by state (e.g. ``{"idle": 3, "busy": 1}``)."""
        for state, count in by_state.items():
            self.kernels.labels(state).set(count)

    def set_sandbox_level(self, level: str) -> None:
        """Mark ``level`` (L0/L1/L3) as the active sandbox level."""
        for known in {*SANDBOX_LEVELS, level}:
            self.sandbox_level.labels(known).set(1 if known == level else 0)

    def observe_db_pool(self, pool: Any) -> None:
        """Sample a SQLAlchemy pool's size and usage at every scrape (pools without them: skip)."""

        def sample() -> None:
            for state, method in (
                ("size", "size"),
                ("checked_out", "checkedout"),
                ("overflow", "overflow"),
            ):
                reader = getattr(pool, method, None)
                if callable(reader):
                    self.db_pool.labels(state).set(float(reader()))

        self.add_sampler(sample)

    def add_sampler(self, sampler: Callable[[], None]) -> None:
        """Run ``sampler`` before each scrape, to refresh gauges from live state."""
        self._samplers.append(sampler)

    # --- exposition --------------------------------------------------------------------------

    def render(self) -> bytes:
        """Refresh sampled gauges and return the text exposition."""
        for sampler in self._samplers:
            try:
                sampler()
            except Exception:  # a broken sampler must not take the whole scrape down
                log.exception("metrics sampler failed")
        return generate_latest(self.registry)


def route_template(scope: Scope) -> str:
    """The matched route's path template (``/v1/runs/{run_id}``), or ``<unmatched>``."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else UNMATCHED_ROUTE


class MetricsMiddleware:
    """Count and time HTTP requests by route template; serve the exposition at ``path``."""

    def __init__(self, app: ASGIApp, metrics: Metrics, path: str = "/metrics") -> None:
        self.app = app
        self.metrics = metrics
        self.path = path
        self.in_flight = 0
        metrics.add_sampler(lambda: metrics.http_in_flight.set(self.in_flight))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if self.metrics.writers.owner is None:  # the lifespan's, or the first request's, thread
            self.metrics.writers.claim()  # (the event loop's) updates the metrics lock-free
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["path"] == self.path:
            await self._serve_metrics(send)
            return
        status = 500  # what the client sees if the app raises before starting a response
        start = time.perf_counter()

        def send_wrapper(message: Message) -> Awaitable[None]:
            # Plain function: body messages pass straight through (see RequestIdMiddleware).
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            return send(message)

        self.in_flight += 1  # a plain int (no lock): exported by a sampler at scrape time
        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.in_flight -= 1
            method = scope["method"] if scope["method"] in _METHODS else "OTHER"
            self.metrics.http_request(
                method, route_template(scope), status, time.perf_counter() - start
            )

    async def _serve_metrics(self, send: Send) -> None:
        body = self.metrics.render()
        headers = [
            (b"content-type", CONTENT_TYPE_LATEST.encode()),
            (b"content-length", str(len(body)).encode()),
        ]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})
