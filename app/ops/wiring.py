"""Install the operational middlewares and handlers on an app; start retention in the lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from fastapi import FastAPI, Request
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker
from starlette.responses import JSONResponse

from app.ops.budget import BudgetExceeded
from app.ops.config import OpsSettings
from app.ops.logging import RequestIdMiddleware, configure_logging
from app.ops.metrics import Metrics, MetricsMiddleware
from app.ops.ratelimit import RateLimit, RateLimitMiddleware, TokenBucketLimiter
from app.ops.retention import RetentionPolicy, RetentionSweeper, SessionDeleted


@dataclass
class Ops:
    """What ``install_ops`` set up (also at ``app.state.ops``)."""

    metrics: Metrics
    limiter: TokenBucketLimiter | None


def install_ops(app: FastAPI, settings: OpsSettings) -> Ops:
    """Logging, request ids, metrics (+ ``/metrics``), rate limits and the budget 429 handler."""
    configure_logging(settings.log_format, settings.log_level)
    metrics = Metrics()
    limiter = None
    # Starlette runs the last-added middleware first: request id, then metrics, then the limit,
    # so 429s are counted and logged with their request id.
    if settings.rate_limit:
        limiter = TokenBucketLimiter(RateLimit.parse(settings.rate_limit))
        app.add_middleware(
            RateLimitMiddleware, limiter=limiter, on_limited=metrics.rate_limited.inc
        )
    app.add_middleware(MetricsMiddleware, metrics=metrics)
    app.add_middleware(RequestIdMiddleware, access_log=settings.access_log)

    async def budget_exceeded(_: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, BudgetExceeded)
        metrics.budget_exceeded.labels(exc.scope).inc()
        # The budget does not refill by waiting: tell SDKs not to retry.
        return JSONResponse(exc.envelope(), status_code=429, headers={"x-should-retry": "false"})

    app.add_exception_handler(BudgetExceeded, budget_exceeded)
    ops = Ops(metrics=metrics, limiter=limiter)
    app.state.ops = ops
    return ops


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
