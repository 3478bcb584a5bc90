"""The application factory: ``create_app(settings)``; the lifespan owns every resource."""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import partial
from typing import Any

from fastapi import FastAPI
from fastapi.middleware.cors import CORSMiddleware

from agents.actions.mcp_conn import CONNECTIONS as mcp_connections
from app.a2a.routes import mount_a2a
from app.api import (
    agents,
    conversations,
    health,
    openai,
    playground,
    responses,
    runs,
    sessions,
)
from app.api.error_handlers import install_error_handlers
from app.api.fastpath import index_routes
from app.db.engine import create_engine, create_sessionmaker
from app.middleware import BodyLimitMiddleware
from app.models.registry import ModelRegistry
from app.openapi import install as install_openapi
from app.ops.tenant_usage import TenantUsage
from app.ops.token_holds import TokenMeter
from app.outbound import OutboundPolicy
from app.runtime.builders import default_registry
from app.runtime.kernels import FleetKernelPool
from app.runtime.liveness import Liveness, new_replica_id
from app.runtime.registry import Registry
from app.runtime.runs import RunManager
from app.services.agent_directory import AgentDirectory
from app.services.auth import ANONYMOUS_TENANT, Authenticator, ensure_tenant
from app.services.messenger import SendMessage
from app.services.runs import session_cache
from app.settings import Settings, get_settings
from app.state import AppState

log = logging.getLogger("agentstation")


def allow_anonymous(settings: Settings) -> bool:
    """Anonymous access only without static keys and only on loopback."""
    return not settings.api_keys and settings.is_loopback


def _new_sandbox(state: AppState) -> None:
    """The kernel pool, before any request: a tool call during the self-test then goes to
    this pool and waits for its (single-flight) start-up instead of racing it."""
    if not state.settings.sandbox_enabled:
        return
    try:
        from agents.sandbox import SandboxConfig
        from app.runtime.kernels import FleetKernelPool

        state.kernel_pool = FleetKernelPool(SandboxConfig.from_env(), state.replica)
    except Exception as exc:  # the service still serves agents without tools
        log.exception("sandbox unavailable")
        state.extras["sandbox_error"] = str(exc)


async def _start_sandbox(state: AppState) -> None:
    pool = state.kernel_pool
    if pool is None:
        return
    # Failures are logged by the pool and shown by /readyz (its state); agents without
    # tools are still served, and the next tool call retries the start-up.
    with contextlib.suppress(Exception):
        log.info("sandbox isolation level %s", await pool.start())


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Build the db engine, models, registry, kernel pool and run manager; close them after."""
    settings: Settings = app.state.settings
    replica = new_replica_id(settings.replica_name)
    engine = create_engine(
        settings.database_url,
        pool_size=settings.db_pool_size,
        max_overflow=settings.db_max_overflow,
        connect_timeout_s=settings.db_connect_timeout_s,
        ping_idle_s=settings.db_ping_idle_s,
        replica=replica,
    )
    sessionmaker = create_sessionmaker(engine)
    anonymous = allow_anonymous(settings)
    state = AppState(
        settings=settings,
        engine=engine,
        sessionmaker=sessionmaker,
        models=ModelRegistry(settings.models),
        registry=default_registry(OutboundPolicy.parse(settings.outbound_allow)),
        auth=Authenticator(settings.api_keys, anonymous, settings.auth_cache_ttl_s),
        agents=AgentDirectory(settings.agent_cache_ttl_s),
        tenant_usage=TenantUsage(
            sessionmaker, settings.tenant_budget_ttl_s, settings.usage_flush_s
        ),
        turn_sessions=session_cache(settings.session_cache_ttl_s),
        replica=replica,
    )
    async with sessionmaker() as db, db.begin():
        for tenant in {t for t, _ in settings.api_keys} | (
            {ANONYMOUS_TENANT} if anonymous else set()
        ):
            await ensure_tenant(db, tenant)
    if anonymous:
        log.warning(
            "no API keys configured: accepting anonymous requests on %s (loopback)", settings.host
        )
    revisions = asyncio.create_task(health.read_revisions())  # for /readyz, off the loop
    await state.models.start()
    await revisions
    _new_sandbox(state)
    sandbox = asyncio.create_task(_start_sandbox(state))
    state.runs = RunManager(
        engine,
        sessionmaker,
        state.build_agent,
        settings.event_flush_s,
        settings.cancel_timeout_s,
        settings.event_store_s,
    )
    # Needs the run manager: agents of one session message another session's agent.
    state.registry.add_tool("SendMessage", partial(SendMessage, state))
    fleet = state.runs.fleet_store()
    if isinstance(state.kernel_pool, FleetKernelPool):
        state.kernel_pool.fleet = fleet
    # Tenants' token budgets, counted call by call in the database (exact over the fleet).
    meter = TokenMeter(sessionmaker, replica, state.runs.write_gate)
    state.tenant_usage.meter = meter
    state.runs.use_token_meter(meter.for_tenant)
    recovered = await state.runs.start()
    if recovered:
        log.warning("marked %d runs left by a stopped process as interrupted", recovered)
    liveness = Liveness(
        fleet,
        state.runs.close_orphan,
        replica,
        state.drain.active,
        settings.heartbeat_s,
        settings.replica_ttl_s,
        release_holds=meter.release_replica,
    )
    state.liveness = liveness
    # Admission: 503 while draining, 503 (not 409) while a dead replica's run is closed.
    state.runs.admit_with(draining=state.drain.active, recovering=liveness.recovering)
    await liveness.start()  # its heartbeat; the runs of dead replicas are closed
    await meter.release_unowned()  # token holds of replicas gone before they were given back
    from app.services.approvals import ApprovalTimeouts

    timeouts = ApprovalTimeouts(state, settings.approval_check_s)  # runs waiting for a person
    timeouts.start()
    app.state.agentstation = state
    extra: list[Any] = []
    for hook in app.state.startup_hooks:  # a hook may be async (app.demo_agents)
        result = hook(state)
        extra.append(await result if inspect.isawaitable(result) else result)
    try:
        yield
    finally:
        for closer in extra:
            if closer is not None:
                await closer()
        await timeouts.aclose()
        await state.tenant_usage.aclose()  # batched tenant usage, before the engine closes
        await state.runs.aclose(settings.shutdown_grace_s)
        await liveness.aclose()
        await mcp_connections.aclose()  # the sessions' MCP servers (stdio ones are sandboxed)
        sandbox.cancel()
        with contextlib.suppress(BaseException):
            await sandbox
        if state.kernel_pool is not None:
            await state.kernel_pool.aclose()
        await state.models.close()
        await engine.dispose()


def _install_ops(app: FastAPI, settings: Settings) -> None:
    """Metrics (/metrics), request ids, logs, rate limits and retention from app.ops."""
    from app.ops.wiring import install_ops, start_ops

    ops = install_ops(app, settings)
    # In the lifespan: instrument models, sample gauges, start retention (returns its closer).
    app.state.startup_hooks.append(lambda state: start_ops(state, ops))


def _specs(app: FastAPI, settings: Settings) -> tuple[Registry, list[str]]:
    """The registry and model names agent specs are checked against (the running app's, else
    what it would have: the document is the same before the lifespan starts)."""
    state = getattr(app.state, "agentstation", None)
    if state is not None:
        return state.registry, list(state.models.names())
    registry = default_registry(OutboundPolicy.parse(settings.outbound_allow))
    return registry, list(ModelRegistry(settings.models).names())


def create_app(settings: Settings | None = None) -> FastAPI:
    """A new application; nothing is connected until the lifespan starts."""
    settings = settings or get_settings()
    app = FastAPI(title="AgentStation", version=health.VERSION, lifespan=lifespan)
    app.state.settings = settings
    app.state.startup_hooks = []
    install_error_handlers(app)
    install_openapi(app, anonymous=allow_anonymous(settings), specs=lambda: _specs(app, settings))
    # Starlette tries routes in order (~0.6 µs each): the OpenAI routes, the hottest, go first.
    for router in (
        openai.router,
        responses.router,
        agents.router,
        sessions.router,
        runs.router,
        conversations.router,
        health.router,
    ):
        app.include_router(router)
    app.include_router(playground.router)  # the page at / (app/static)
    mount_a2a(app)
    index_routes(app.router)  # only the routes a path can match are tried (app/api/fastpath.py)
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.max_body_bytes)
    if settings.cors_origins:
        app.add_middleware(
            CORSMiddleware,
            allow_origins=settings.cors_origins,
            allow_methods=["*"],
            allow_headers=["*"],
            expose_headers=["Content-Location", "x-request-id"],
        )
    _install_ops(app, settings)
    return app
