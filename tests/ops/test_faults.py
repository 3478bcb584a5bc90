"""Fault tests against a live service on a private PostgreSQL: SIGKILL mid-run, then restart;
PostgreSQL restarting under load."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from app.db.migrate import upgrade
from tests.ops.faults import PrivatePostgres, ServiceProcess

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
        pg.start()
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


def sse_events(text: str) -> list[dict[str, Any]]:
    events = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line)
        if "event" in fields:
            events.append({"id": int(fields["id"]), "event": fields["event"]})
    return events


async def test_sigkill_mid_run_then_restart(postgres: PrivatePostgres) -> None:
    svc = service(postgres)
    svc.start()
    try:
        async with httpx.AsyncClient(base_url=svc.base_url, headers=AUTH, timeout=30) as c:
            spec = {"kind": "agent", "model": "slow"}
            assert (await c.post("/v1/agents", json={"name": "s", "spec": spec})).is_success
            assert (await c.post("/v1/sessions", json={"agent": "s", "id": "k"})).is_success
            done = await c.post("/v1/sessions/k/messages", json={"message": "first"})
            assert done.json()["run"]["status"] == "completed"
            before = (await c.get("/v1/sessions/k/memory")).json()
            # Second turn: stream until a few deltas are stored, then kill the process.
            body = {"message": "second", "stream": True, "on_disconnect": "continue"}
            async with c.stream("POST", "/v1/sessions/k/messages", json=body) as resp:
                run_id = resp.headers["content-location"].rsplit("/", 1)[1]
                deltas = 0
                async for line in resp.aiter_lines():
                    deltas += line == "event: message.delta"
                    if deltas >= 5:
                        break
            await asyncio.sleep(0.3)  # past one event flush interval
        svc.kill()
        svc.start()  # a new process on the same database
        async with httpx.AsyncClient(base_url=svc.base_url, headers=AUTH, timeout=30) as c:
            run = (await c.get(f"/v1/runs/{run_id}")).json()
            assert run["status"] == "interrupted", run
            # Memory holds no half turn: exactly the first, complete turn.
            assert (await c.get("/v1/sessions/k/memory")).json() == before
            replay = await c.get(f"/v1/runs/{run_id}/events")
            events = sse_events(replay.text)
            kinds = [e["event"] for e in events]
            assert kinds[0] == "run.created" and "message.delta" in kinds
            assert kinds[-1] == "run.cancelled"
            assert [e["id"] for e in events] == list(range(1, len(events) + 1))
            # The session works again.
            again = await c.post("/v1/sessions/k/messages", json={"message": "third"})
            assert again.json()["run"]["status"] == "completed"
    finally:
        svc.stop()


class Load:
    """Clients that keep sending requests and record (start, status, seconds, code)."""

    def __init__(self, client: httpx.AsyncClient, sessions: list[str]) -> None:
        self.client = client
        self.sessions = sessions
        self.results: list[tuple[float, int, float, str | None]] = []
        self.running = True

    async def worker(self, sid: str) -> None:
        n = 0
        while self.running:
            n += 1
            start = time.monotonic()
            if n % 2:
                resp = await self.client.post(
                    f"/v1/sessions/{sid}/messages", json={"message": f"m{n}"}
                )
            else:
                resp = await self.client.get("/v1/agents")
            code = resp.json().get("error", {}).get("code") if resp.status_code >= 400 else None
            self.results.append((start, resp.status_code, time.monotonic() - start, code))
            await asyncio.sleep(0.02)

    def between(self, t0: float, t1: float) -> list[tuple[float, int, float, str | None]]:
        return [r for r in self.results if t0 <= r[0] and r[0] + r[2] <= t1]


async def test_postgres_restart_under_load_fails_fast_then_recovers(
    postgres: PrivatePostgres,
) -> None:
    svc = service(postgres)
    svc.start()
    pid = svc.proc.pid if svc.proc else None
    try:
        async with httpx.AsyncClient(base_url=svc.base_url, headers=AUTH, timeout=30) as c:
            spec = {"kind": "agent", "model": "echo"}
            assert (await c.post("/v1/agents", json={"name": "e", "spec": spec})).is_success
            sessions = [f"load-{i}" for i in range(4)]
            for sid in sessions:
                assert (await c.post("/v1/sessions", json={"agent": "e", "id": sid})).is_success
            load = Load(c, sessions)
            workers = [asyncio.create_task(load.worker(sid)) for sid in sessions]
            await asyncio.sleep(2)
            t_down = time.monotonic()
            await asyncio.to_thread(postgres.stop, "fast")
            await asyncio.sleep(3)
            ready_down = (await c.get("/readyz")).status_code
            t_up = time.monotonic()
            await asyncio.to_thread(postgres.start)
            await asyncio.sleep(4)
            load.running = False
            await asyncio.gather(*workers)
            ready_up = (await c.get("/readyz")).status_code
        before = load.between(0, t_down)
        down = load.between(t_down + 0.5, t_up)
        after = load.between(time.monotonic() - 2.5, time.monotonic())
        assert before and all(r[1] == 200 for r in before), before[-5:]
        assert down, "no request ran while PostgreSQL was down"
        assert {r[1] for r in down} == {503}, sorted({(r[1], r[3]) for r in down})
        assert {r[3] for r in down} == {"database_unavailable"}
        assert max(r[2] for r in down) < 2.0  # fail fast, no hanging on a dead pool
        assert after and all(r[1] == 200 for r in after), [r for r in after if r[1] != 200][:5]
        assert (ready_down, ready_up) == (503, 200)
        assert svc.proc is not None and svc.proc.poll() is None and svc.proc.pid == pid
    finally:
        svc.stop()


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
