"""/readyz is 503 naming each part that is not ready (a model loading, the sandbox's self-test
running or ending below the minimum level), with retry-after; requests in that window are
refused with 503 and retry-after, never answered wrongly."""

from __future__ import annotations

import asyncio
import shutil
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from agents.sandbox import KernelPool, selftest
from agents.sandbox.config import Level
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent, make_session
from tests.lifespan import LifespanManager


async def test_a_loading_model_is_not_ready_and_its_requests_are_503(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", model="echo")
    sid = await make_session(client, "helper")
    handle = app.state.agentstation.models.get("echo")
    handle.ready = False  # as a vLLM engine while it loads
    ready = await client.get("/readyz")
    assert ready.status_code == 503 and ready.headers["retry-after"] == "1"
    assert ready.json()["not_ready"] == ["models.echo"], ready.json()
    assert ready.json()["models"]["echo"] == "loading"
    sent = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert sent.status_code == 503 and sent.headers["retry-after"] == "1"
    assert sent.json()["error"]["code"] == "model_not_ready"
    handle.ready = True
    assert (await client.get("/readyz")).status_code == 200
    sent = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert sent.status_code == 200 and sent.json()["run"]["status"] == "completed"


async def test_a_database_behind_this_release_is_not_ready(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """A replica of a new release on a database not yet migrated would meet missing columns."""

    async def stamp(version: str) -> None:
        async with app.state.agentstation.engine.begin() as conn:
            await conn.execute(
                sa.text("UPDATE alembic_version SET version_num = :v"), {"v": version}
            )

    await stamp("0001")
    behind = await client.get("/readyz")
    assert behind.status_code == 503 and behind.json()["not_ready"] == ["database"]
    assert behind.json()["database"] == "migration_needed"
    await stamp("9999")  # a newer release migrated it (a rolling deploy): still served
    newer = await client.get("/readyz")
    assert newer.status_code == 200 and newer.json()["database"] == "ok", newer.json()


@pytest.mark.kernel
async def test_the_sandbox_is_not_ready_while_starting_nor_below_the_minimum(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    gate = threading.Event()  # the self-test runs on the pool's own loop and thread

    async def self_test(pool: KernelPool) -> Level:
        await asyncio.to_thread(gate.wait, 30)
        return "L1"  # below the default minimum, L3

    base = Path(tempfile.mkdtemp(prefix="agentstation-ready-"))
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base))
    monkeypatch.setattr(selftest, "detect", self_test)
    app = create_app(settings_factory(sandbox_enabled=True))
    try:
        async with LifespanManager(app, startup_timeout=30, shutdown_timeout=30):
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {KEY_A}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=headers
            ) as c:
                starting = await c.get("/readyz")
                assert starting.status_code == 503 and starting.json()["not_ready"] == ["sandbox"]
                assert starting.json()["sandbox"]["state"] == "starting"
                gate.set()
                pool = app.state.agentstation.kernel_pool
                assert await pool.start() == "L1"  # joins the one start-up, until it ends
                weak = await c.get("/readyz")
                assert weak.status_code == 503 and weak.json()["not_ready"] == ["sandbox"]
                sandbox = weak.json()["sandbox"]
                assert sandbox["level"] == "L1" and sandbox["level_ok"] is False, sandbox
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_the_migrations_are_read_at_start_up_not_in_the_first_probe(
    settings_factory: Callable[..., Settings],
) -> None:
    """Reading alembic's scripts holds the GIL for ~0.1 s (seconds on a loaded machine): done
    in the first /readyz, it stalled every request in flight (the PostgreSQL restart test's
    slow 503s). The lifespan reads them; the first probe finds them read."""
    from app.db.migrate import revisions

    revisions.cache_clear()
    app = create_app(settings_factory())
    async with LifespanManager(app):
        assert revisions.cache_info().currsize == 1  # read before any request
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
            assert (await c.get("/readyz")).status_code == 200
        assert revisions.cache_info().misses == 1  # the probe did not read them again
