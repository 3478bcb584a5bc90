"""Cross-replica cancel keeps working after PostgreSQL restarts (a private cluster): the
cancel listener notices its connection is gone and opens a new one, with backoff."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from app.db.engine import create_engine
from app.main import create_app
from app.runtime.notify import CancelBus
from tests.app.conftest import KEY_A, make_agent, make_session, make_settings
from tests.lifespan import LifespanManager
from tests.resilience.procs import PrivatePostgres

pytestmark = [pytest.mark.slow, pytest.mark.postgres]


async def _until(check: Callable[[], bool], what: str) -> None:
    for _ in range(300):  # 15 s
        if check():
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


async def test_cancel_listener_reconnects_after_a_database_restart(
    private_pg: PrivatePostgres, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="app.runtime.notify")
    engine = create_engine(private_pg.url)
    received: list[tuple[str, str]] = []
    bus = CancelBus(
        engine,
        lambda run_id, mode: received.append((run_id, mode)),
        backoff_s=0.1,
        max_backoff_s=0.5,
    )
    await bus.start()
    try:
        await bus.publish("run_before", "cancelled")
        await _until(lambda: ("run_before", "cancelled") in received, "the first cancel")

        await asyncio.to_thread(private_pg.stop)  # every client is disconnected
        await _until(lambda: "reconnect 1 failed" in caplog.text, "a failed reconnect")
        await asyncio.sleep(0.6)  # a few more attempts against the stopped database
        await asyncio.to_thread(private_pg.start)
        await _until(lambda: bus.reconnects == 1, "the listener to come back")

        # Another replica (the pool re-connects by itself) asks for a cancel: it still arrives.
        await bus.publish("run_after", "shutdown")
        await _until(lambda: ("run_after", "shutdown") in received, "a cancel after the restart")
    finally:
        await bus.aclose()
        await engine.dispose()
    assert "cancel listener connection lost" in caplog.text
    assert "cancel listener re-established" in caplog.text
    assert received == [("run_before", "cancelled"), ("run_after", "shutdown")]


def _bus(app: FastAPI) -> CancelBus:
    bus: CancelBus = app.state.agentstation.run_manager.bus
    return bus


async def test_cancel_from_another_replica_after_a_database_restart(
    private_pg: PrivatePostgres,
) -> None:
    one, two = create_app(make_settings(private_pg.url)), create_app(make_settings(private_pg.url))
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with LifespanManager(one), LifespanManager(two):
        c1 = httpx.AsyncClient(transport=httpx.ASGITransport(app=one), base_url="http://1")
        c2 = httpx.AsyncClient(transport=httpx.ASGITransport(app=two), base_url="http://2")
        async with c1, c2:
            c1.headers.update(headers)
            c2.headers.update(headers)
            await asyncio.to_thread(private_pg.stop)
            await asyncio.to_thread(private_pg.start)
            await _until(lambda: _bus(one).reconnects == _bus(two).reconnects == 1, "listeners")

            await make_agent(c1, model="slow")
            sid = await make_session(c1)
            first = asyncio.create_task(
                c1.post(f"/v1/sessions/{sid}/messages", json={"message": "go"})
            )
            run_id = await _running(c1, sid)
            cancelled = await c2.post(f"/v1/runs/{run_id}/cancel")
            assert cancelled.json()["status"] == "cancelled"
            # Replica one got the request and stopped its own run (not just a status write).
            run = (await first).json()["run"]
            assert run["status"] == "cancelled"
            assert run["output"] is None


async def _running(client: httpx.AsyncClient, sid: str) -> str:
    for _ in range(500):
        runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        if runs and runs[0]["status"] == "running":
            return str(runs[0]["id"])
        await asyncio.sleep(0.01)
    raise AssertionError("the run never started")
