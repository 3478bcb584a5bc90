"""/healthz and /readyz (no auth)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from starlette.responses import JSONResponse

from app.deps import StateDep
from app.state import AppState

log = logging.getLogger(__name__)
router = APIRouter(tags=["health"])
VERSION = "0.1.0"


@router.get("/healthz")
async def healthz() -> dict[str, str]:
    """The process is up."""
    return {"status": "ok"}


@router.get(
    "/readyz",
    responses={503: {"description": "Not ready: the same checks, `status: not_ready`"}},
)
async def readyz(state: StateDep) -> JSONResponse:
    """Ready only when every part is: the database answers, every model is loaded, and (when
    the sandbox is enabled) its self-test reached at least the minimum level. 503 until then,
    with ``not_ready`` naming the parts that are not (and ``retry-after``); ``draining`` while
    the replica shuts down."""
    checks: dict[str, Any] = {"version": VERSION}
    waiting: list[str] = []
    if state.drain.active():  # SIGTERM: it takes no new turns (app/ops/drain.py)
        waiting.append("draining")
    checks["database"] = await _database(state)
    if checks["database"] != "ok":
        waiting.append("database")
    models = state.models.status()
    checks["models"] = models
    waiting += [f"models.{name}" for name, status in models.items() if status != "ready"]
    checks["sandbox"] = sandbox = _sandbox(state)
    if sandbox["enabled"] and not sandbox.get("ready"):
        waiting.append("sandbox")
    checks["status"] = "not_ready" if waiting else "ready"
    if waiting:
        checks["not_ready"] = waiting
        return JSONResponse(checks, status_code=503, headers={"retry-after": "1"})
    return JSONResponse(checks)


def _revisions() -> tuple[str, frozenset[str]]:
    from app.db.migrate import revisions  # alembic: imported off the event loop, once

    return revisions()


async def read_revisions() -> None:
    """Read the migrations' revisions during start-up (the lifespan, beside the models'
    start), not in the first ``/readyz``: importing alembic and its scripts holds the GIL
    for ~0.1 s (seconds on a loaded machine), which stalled every request in flight."""
    try:
        await asyncio.to_thread(_revisions)
    except Exception:  # /readyz reads them again and says what is wrong
        log.warning("could not read the migrations' revisions", exc_info=True)


async def _database(state: AppState) -> str:
    """``ok``; ``migration_needed`` while its schema is behind this release's (a request
    would meet missing columns: run ``agentstation migrate``); ``unavailable``. A revision this
    release does not know is a newer release's migration (a rolling deploy): ok."""
    head, known = await asyncio.to_thread(_revisions)
    try:
        async with state.engine.connect() as conn:
            found = (await conn.execute(sa.text("SELECT version_num FROM alembic_version"))).all()
    except Exception:
        log.warning("readiness: the database does not answer", exc_info=True)
        return "unavailable"
    versions = {row[0] for row in found}
    if head in versions or versions - known:
        return "ok"
    log.warning("readiness: the database is at %s, this release needs %s", versions, head)
    return "migration_needed"


def _sandbox(state: AppState) -> dict[str, Any]:
    """The sandbox's part: enabled by settings; ready once its level is known and enough."""
    pool = state.kernel_pool
    enabled = state.settings.sandbox_enabled
    info: dict[str, Any] = {
        "enabled": enabled,
        "level": getattr(pool, "level", None),
        "min_level": getattr(getattr(pool, "config", None), "min_level", None),
    }
    if not enabled:
        return info
    if pool is None:  # it could not even be built (its settings): see the server log
        info["error"] = "the sandbox failed to start (see the server log)"
    elif pool.level is None:
        # Failed start-ups are retried by the next tool call; until one succeeds: not ready.
        info["state"] = "failed" if pool.start_error else "starting"
        if pool.start_error:
            info["error"] = "the sandbox failed to start (see the server log)"
    else:
        # Below the minimum the pool refuses to run code: not ready for tool calls.
        info["level_ok"] = bool(pool.level_ok)
        info["ready"] = bool(pool.level_ok)
    return info
