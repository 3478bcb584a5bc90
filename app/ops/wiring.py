"""Install the operational middlewares and handlers on an app; start retention in the lifespan."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fastapi import FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.responses import JSONResponse

from app.ops.budget import BudgetExceeded
from app.ops.config import OpsSettings
from app.ops.instrument import instrument_models, observe_runs, record_run, sample_kernel_pool
from app.ops.logging import RequestIdMiddleware, configure_logging
from app.ops.metrics import Metrics, MetricsMiddleware
from app.ops.ratelimit import RateLimit, RateLimitMiddleware
from app.ops.retention import RetentionPolicy, RetentionSweeper, SessionDeleted
from app.ops.shared_limits import FleetLimiter
from app.ops.tracing import Tracing, setup_tracing, start_tracing

if TYPE_CHECKING:
    from app.state import AppState

log = logging.getLogger(__name__)


@dataclass
class Ops:
    """What ``install_ops`` set up (also at ``app.state.ops``)."""

    metrics: Metrics
    limiter: FleetLimiter | None  # counted in PostgreSQL once bound to it (start_ops)
    tracing: Tracing | None = None  # OpenTelemetry, when configured (app/ops/tracing.py)


def install_ops(app: FastAPI, settings: OpsSettings) -> Ops:
    """Logging, request ids, metrics (+ ``/metrics``), rate limits and the budget 429 handler."""
    configure_logging(settings.log_format, settings.log_level)
    metrics = Metrics()
    limiter = None
    # Starlette runs the last-added middleware first: request id, then metrics, then the limit,
    # so 429s are counted and logged with their request id.
    if settings.rate_limit:
        limiter = FleetLimiter(RateLimit.parse(settings.rate_limit))
        app.add_middleware(
            RateLimitMiddleware, limiter=limiter, on_limited=metrics.rate_limited.inc
        )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(RequestIdMiddleware, access_log=settings.access_log)
    tracing = setup_tracing()  # None unless the OTEL_* variables ask for traces
    if tracing is not None:  # outermost: the request's span covers everything below
        from app.ops.tracing import TracingMiddleware

        app.add_middleware(TracingMiddleware, tracing=tracing)

    _install_handlers(app, metrics)
    ops = Ops(metrics=metrics, limiter=limiter, tracing=tracing)
    app.state.ops = ops
    return ops


def _install_handlers(app: FastAPI, metrics: Metrics) -> None:
    """429 for a spent budget."""

    async def budget_exceeded(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BudgetExceeded)
        metrics.budget_exceeded.labels(exc.scope).inc()
        # The budget does not refill by waiting: tell SDKs not to retry.
        return JSONResponse(exc.envelope(), status_code=429, headers={"x-should-retry": "false"})

    app.add_exception_handler(BudgetExceeded, budget_exceeded)

    # A database outage (503 database_unavailable) is answered by app.errors' handlers.


def start_retention(
    settings: OpsSettings,
    factory: async_sessionmaker[AsyncSession],
    on_session_deleted: SessionDeleted | None = None,
) -> RetentionSweeper:
    """Start the periodic sweep (a no-op sweeper when both TTLs are 0); ``aclose`` it at exit."""
    policy = RetentionPolicy(
        session_ttl_s=settings.session_ttl_s,
        run_events_ttl_s=settings.run_events_ttl_s,
        interval_s=settings.retention_interval_s,
    )
    sweeper = RetentionSweeper(factory, policy, on_session_deleted)
    sweeper.start()
    return sweeper


def start_ops(state: AppState, ops: Ops) -> Callable[[], Awaitable[None]]:
    """Lifespan part: instrument models, sample live state, start retention; returns a closer."""
    metrics = ops.metrics
    if ops.limiter is not None:
        # A database shared by replicas (PostgreSQL): one counter for the fleet.
        ops.limiter.bind(state.engine, shared=state.runs is not None and state.runs.shared)
    providers = {name: config.backend for name, config in state.models.configs.items()}
    instrument_models(state.models.handles, metrics, providers)
    close_tracing = start_tracing(state, ops.tracing) if ops.tracing is not None else None
    metrics.observe_db_pool(state.engine.sync_engine.pool)

    def jobs() -> list[Any]:
        return list(state.runs.jobs.values()) if state.runs is not None else []

    def kernel_sessions() -> set[str]:
        pool = state.kernel_pool
        return {key[0] for key in list(pool.kernels)} if pool is not None else set()

    def sample_pool() -> None:
        # The kernel pool starts in the background: it may appear after the lifespan began.
        if state.kernel_pool is not None:
            sample_kernel_pool(metrics, state.kernel_pool)

    observe_runs(metrics, jobs, kernel_sessions)
    if state.runs is not None:
        runs = state.runs
        runs.on_finished = lambda run: record_run(metrics, run)
        runs.on_approval = metrics.approval_decided
        metrics.add_sampler(lambda: metrics.approvals_waiting.set(runs.waiting_count))
    metrics.add_sampler(sample_pool)

    async def on_session_deleted(tenant_id: str, session_id: str) -> None:
        if state.kernel_pool is not None:
            # The session is gone for good: its kernel and its work dir go too.
            await state.kernel_pool.shutdown_session(f"{tenant_id}:{session_id}", remove_files=True)

    sweeper = start_retention(state.settings, state.sessionmaker, on_session_deleted)
    if close_tracing is None:
        return sweeper.aclose

    async def close() -> None:
        await sweeper.aclose()
        close_tracing()  # exports the spans still batched

    return close
