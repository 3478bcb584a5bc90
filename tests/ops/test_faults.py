"""Graceful shutdown against a live service on a private PostgreSQL.

SIGKILL mid-run, PostgreSQL restarts under load, fuzzing and the load test are in tests/resilience.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from app.db.migrate import upgrade
from tests.ops.faults import ServiceProcess
from tests.resilience.procs import PrivatePostgres

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.postgres]
KEY = "fault-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SLOW_REPLY = " ".join(f"w{i}" for i in range(40))
MODELS = [
    {"name": "echo", "backend": "scripted"},
    {"name": "slow", "backend": "scripted", "replies": [SLOW_REPLY], "chunk_delay_s": 0.1},
    {"name": "slower", "backend": "scripted", "replies": [SLOW_REPLY], "chunk_delay_s": 1.0},
]


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    try:
        pg.init()
        upgrade(pg.url)
        yield pg
    finally:
        pg.destroy()


def service(pg: PrivatePostgres, **env: str) -> ServiceProcess:
    return ServiceProcess(
        env
        | {
            "AGENTSTATION_DATABASE_URL": pg.url,
            "AGENTSTATION_MODELS": json.dumps(MODELS),
            "AGENTSTATION_API_KEYS": f"t:{KEY}",
            "AGENTSTATION_SANDBOX_ENABLED": "false",
            "AGENTSTATION_LOG_LEVEL": "WARNING",
            "AGENTSTATION_EVENT_FLUSH_S": "0.05",
        }
    )


async def start_detached(c: httpx.AsyncClient, agent: str, sid: str) -> str:
    """Start a run that outlives its request; return its id once it streams."""
    spec = {"kind": "agent", "model": agent}
    assert (await c.post("/v1/agents", json={"name": agent, "spec": spec})).is_success
    assert (await c.post("/v1/sessions", json={"agent": agent, "id": sid})).is_success
    body = {"message": "go", "stream": True, "on_disconnect": "continue"}
    async with c.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
        async for line in resp.aiter_lines():
            if line == "event: message.delta":
                break
    return resp.headers["content-location"].rsplit("/", 1)[1]


async def test_sigterm_lets_runs_finish_within_the_grace_period(
    postgres: PrivatePostgres,
) -> None:
    svc = service(postgres, AGENTSTATION_SHUTDOWN_GRACE_S="6")
    svc.start()
    try:
        async with httpx.AsyncClient(base_url=svc.base_url, headers=AUTH, timeout=30) as c:
            short = await start_detached(c, "slow", "short")  # ≈ 4 s: finishes in the grace
            long = await start_detached(c, "slower", "long")  # ≈ 40 s: interrupted
        started = time.monotonic()
        assert svc.proc is not None
        svc.proc.terminate()
        svc.proc.wait(30)
        assert time.monotonic() - started < 20
        svc.start()
        async with httpx.AsyncClient(base_url=svc.base_url, headers=AUTH, timeout=30) as c:
            finished = (await c.get(f"/v1/runs/{short}")).json()
            cut = (await c.get(f"/v1/runs/{long}")).json()
            memory = (await c.get("/v1/sessions/short/memory")).json()
        assert (finished["status"], finished["stop_reason"]) == ("completed", "end")
        assert memory["memory"][-1]["content"] == SLOW_REPLY
        assert (cut["status"], cut["stop_reason"]) == ("interrupted", "shutdown")
    finally:
        svc.stop()
