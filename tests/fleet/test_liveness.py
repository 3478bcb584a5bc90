"""Replica liveness with real processes: three `agentstation serve` replicas on one fresh
PostgreSQL database, default heartbeat settings (1 s, TTL 10 s).

A replica that is stopped (SIGSTOP: hung, its connections still open, so only its heartbeat
tells) and then one that is killed (SIGKILL: its connections close) each have a turn running;
a live replica closes each run ``interrupted`` (``replica_lost``) within 15 s, read from the
database with nothing else touching the runs, while the live replicas' own runs go on (no live
replica is taken for dead meanwhile). The stopped replica, continued, finds itself fenced and
its run stays closed. Measured at load average 13-16 on 2 cores: 10.1-10.3 s (stopped),
0.8-1.0 s (killed); the test takes ~1 min.
"""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest

from app.db.migrate import upgrade
from tests.app.conftest import KEY_A, PG_URL, _drop_pg_database, _fresh_pg_database
from tests.resilience.procs import Service, wait_until

pytestmark = [pytest.mark.postgres, pytest.mark.slow, pytest.mark.live]

AUTH = {"Authorization": f"Bearer {KEY_A}"}
# A turn of ~50 s: 200 words, 0.25 s apart.
SLOW = {
    "name": "slow",
    "backend": "scripted",
    "replies": [" ".join(["word"] * 200)],
    "chunk_delay_s": 0.25,
    "cycle": "model",
}


@pytest.fixture
def replicas(tmp_path: Path) -> Iterator[tuple[str, list[Service]]]:
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    url = asyncio.run(_fresh_pg_database())
    services: list[Service] = []
    try:
        upgrade(url)
        for i in range(3):
            service = Service(url, tmp_path, models=[SLOW])
            service.env.update(
                AGENTSTATION_REPLICA_NAME=f"r{i}",
                AGENTSTATION_DB_POOL_SIZE="8",
                AGENTSTATION_DB_MAX_OVERFLOW="2",
            )
            services.append(service)
        for service in services:
            service.start(timeout=120)
        yield url, services
    finally:
        for service in services:
            if service.proc is not None and service.proc.poll() is None:
                service.proc.send_signal(signal.SIGCONT)
            service.stop()
        asyncio.run(_drop_pg_database(url))


async def _run_of(db: asyncpg.Connection, sid: str) -> dict[str, Any] | None:
    row = await db.fetchrow(
        "SELECT id, status, stop_reason, replica FROM runs WHERE session_id = $1 "
        "ORDER BY created_at DESC LIMIT 1",
        sid,
    )
    return dict(row) if row is not None else None


async def _running_on(db: asyncpg.Connection, sid: str, name: str) -> dict[str, Any]:
    for _ in range(300):
        run = await _run_of(db, sid)
        if run is not None and run["status"] == "running":
            assert str(run["replica"]).endswith(f"-{name}"), run
            return run
        await asyncio.sleep(0.1)
    raise AssertionError(f"the turn of {sid} never ran on {name}")


async def _closed_within(db: asyncpg.Connection, sid: str, since: float) -> float:
    """Seconds from ``since`` until the session's run is no longer running (at most 30)."""
    while time.monotonic() - since < 30:
        run = await _run_of(db, sid)
        assert run is not None
        if run["status"] != "running":
            assert (run["status"], run["stop_reason"]) == ("interrupted", "replica_lost"), run
            return time.monotonic() - since
        await asyncio.sleep(0.2)
    raise AssertionError(f"the run of {sid} is still running 30 s later")


async def _session(c: httpx.AsyncClient) -> str:
    resp = await c.post("/v1/sessions", json={"agent": "talker"})
    assert resp.status_code == 201, resp.text
    return str(resp.json()["id"])


async def _scenario(url: str, services: list[Service]) -> None:
    clients = [httpx.AsyncClient(base_url=s.url, headers=AUTH, timeout=120) for s in services]
    db = await asyncpg.connect(url.replace("postgresql+asyncpg://", "postgresql://"))
    turns: list[asyncio.Task[Any]] = []
    try:
        agent = {"name": "talker", "spec": {"kind": "agent", "model": "slow"}}
        assert (await clients[2].post("/v1/agents", json=agent)).status_code == 201
        sids = [await _session(clients[2]) for _ in range(3)]
        # One long turn on each replica, sent straight to it.
        for i, sid in enumerate(sids):
            body = {"message": "talk"}
            turns.append(
                asyncio.create_task(clients[i].post(f"/v1/sessions/{sid}/messages", json=body))
            )
        for i, sid in enumerate(sids):
            await _running_on(db, sid, f"r{i}")
        proc0, proc1 = services[0].proc, services[1].proc
        assert proc0 is not None and proc1 is not None

        os.kill(proc0.pid, signal.SIGSTOP)  # hung: connected, silent
        stopped_s = await _closed_within(db, sids[0], time.monotonic())
        print(f"stopped replica's run interrupted after {stopped_s:.1f} s")
        assert stopped_s < 15
        # The live replicas were not taken for dead meanwhile: their runs go on.
        for sid in sids[1:]:
            assert (await _run_of(db, sid) or {}).get("status") == "running"

        proc1.kill()  # SIGKILL: its connections close with it
        proc1.wait(10)
        killed_s = await _closed_within(db, sids[1], time.monotonic())
        print(f"killed replica's run interrupted after {killed_s:.1f} s")
        assert killed_s < 15
        assert (await _run_of(db, sids[2]) or {}).get("status") == "running"

        # The stopped replica continues: it was fenced, and its run stays closed; the live
        # replica was never taken for dead.
        os.kill(proc0.pid, signal.SIGCONT)
        await asyncio.sleep(3)
        assert (await _run_of(db, sids[0]) or {}).get("status") == "interrupted"
        ids = {row["id"] for row in await db.fetch("SELECT id FROM replicas")}
        assert any(i.endswith("-r2") for i in ids) and not any(i.endswith("-r1") for i in ids)
        assert (await _run_of(db, sids[2]) or {}).get("status") == "running"
    finally:
        for task in turns:
            task.cancel()
        await asyncio.gather(*turns, return_exceptions=True)
        await db.close()
        for client in clients:
            await client.aclose()


def test_a_stopped_or_killed_replicas_runs_are_interrupted_within_15_s(
    replicas: tuple[str, list[Service]],
) -> None:
    url, services = replicas
    for service in services:
        wait_until(
            lambda s=service: httpx.get(f"{s.url}/readyz", timeout=5).status_code == 200,
            60,
            "a replica to be ready",
            interval=0.5,
        )
    asyncio.run(_scenario(url, services))
