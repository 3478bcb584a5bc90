"""/healthz and /readyz (no auth)."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from fastapi import APIRouter
from starlette.responses import JSONResponse

from app.deps import StateDep

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
    """Database reachable, models loaded, sandbox level; 503 until all are fine."""
    checks: dict[str, Any] = {"version": VERSION}
    ok = True
    try:
        async with state.engine.connect() as conn:
            await conn.execute(sa.text("SELECT 1"))
        checks["database"] = "ok"
    except Exception as exc:
        checks["database"] = f"error: {exc}"
        ok = False
    models = state.models.status()
    checks["models"] = models
    ok = ok and all(s == "ready" for s in models.values())
    pool = state.kernel_pool
    checks["sandbox"] = {
        "level": getattr(pool, "level", None) if pool is not None else None,
        "min_level": getattr(getattr(pool, "config", None), "min_level", None),
        "enabled": pool is not None,
    }
    if pool is not None and getattr(pool, "level", None) is not None:
        # Below the minimum the pool refuses to run code; agents without tools still work.
        checks["sandbox"]["level_ok"] = bool(pool.level_ok)
    if "sandbox_error" in state.extras:
        checks["sandbox"]["error"] = state.extras["sandbox_error"]
    checks["status"] = "ready" if ok else "not_ready"
    return JSONResponse(checks, status_code=200 if ok else 503)
