"""Replica liveness on PostgreSQL: heartbeats, the sweep of a dead replica's runs (a replica
with no connection left, or a stale heartbeat: fenced), and a draining replica."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from app.db.base import utcnow
from app.db.models import Replica, Run
from app.main import create_app
from tests.app.conftest import (
    KEY_A,
    make_agent,
    make_session,
    make_settings,
    migrated_pg_database,
    parse_sse,
)
from tests.lifespan import LifespanManager

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pg_app() -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient, str]]:
    async with migrated_pg_database() as url:
        app = create_app(make_settings(url, heartbeat_s=60.0))  # sweeps only when called here
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with (
            LifespanManager(app),
            httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c,
        ):
            yield app, c, url


def _run(run_id: str, session_pk: str, sid: str, status: str, replica: str) -> Run:
    return Run(
        id=run_id, tenant_id="a", session_pk=session_pk, session_id=sid, agent="helper",
        agent_version=1, status=status, input={"content": "y"}, options={}, prompt_tokens=0,
        completion_tokens=0, created_at=utcnow(), started_at=utcnow(), replica=replica,
    )  # fmt: skip


async def _replica(state: Any, replica: str, age_s: float = 0.0) -> None:
    async with state.sessionmaker() as db, db.begin():
        beat = sa.func.now() - sa.func.make_interval(0, 0, 0, 0, 0, 0, age_s)
        await db.execute(sa.insert(Replica).values(id=replica, started_at=beat, beat_at=beat))


def _asyncpg_url(url: str) -> str:
    return url.replace("postgresql+asyncpg://", "postgresql://")


async def test_a_dead_replicas_runs_are_interrupted_by_a_live_one(
    pg_app: tuple[FastAPI, httpx.AsyncClient, str],
) -> None:
    app, c, url = pg_app
    state = app.state.agentstation
    await make_agent(c)
    sids = [await make_session(c) for _ in range(2)]
    pks = []
    for sid in sids:
        done = (await c.post(f"/v1/sessions/{sid}/messages", json={"message": "x"})).json()
        pks.append((await _row(state, done["run"]["id"])).session_pk)
        # This replica's own runs carry its id (the connection's agentstation.replica).
        assert (await _row(state, done["run"]["id"])).replica == state.replica
    # A replica killed with runs: one running (its session lock went with its connections),
    # one queued behind it; and a live replica (connected, fresh heartbeat) with a run.
    await _replica(state, "dead-1")
    live = await asyncpg.connect(
        _asyncpg_url(url), server_settings={"application_name": "agentstation:live-1"}
    )
    try:
        await _replica(state, "live-1")
        async with state.sessionmaker() as db, db.begin():
            db.add(_run("run_dead_running", pks[0], sids[0], "running", "dead-1"))
            db.add(_run("run_dead_queued", pks[0], sids[0], "queued", "dead-1"))
            db.add(_run("run_live", pks[1], sids[1], "queued", "live-1"))
        # Meanwhile a turn of that session is told to retry (503), not that it is busy (409).
        busy = await c.post(f"/v1/sessions/{sids[0]}/messages", json={"message": "now"})
        assert busy.status_code == 503 and busy.headers["retry-after"] == "1"
        assert busy.json()["error"]["code"] == "session_recovering"
        # A live replica's busy session still answers 409.
        other = await c.post(f"/v1/sessions/{sids[1]}/messages", json={"message": "now"})
        assert other.status_code == 409
        assert await state.liveness.sweep() >= 1  # the running one may have been reaped above
        for run_id in ("run_dead_running", "run_dead_queued"):
            run = (await c.get(f"/v1/runs/{run_id}")).json()
            # The running one was reaped by the turn above, the queued one by the sweep.
            assert (run["status"], run["stop_reason"]) == ("interrupted", "replica_lost")
            frames = parse_sse((await c.get(f"/v1/runs/{run_id}/events")).text)
            assert frames[-1]["event"] == "run.cancelled"
        assert (await c.get("/v1/runs/run_live")).json()["status"] == "queued"
        async with state.sessionmaker() as db:
            rows = dict((await db.execute(sa.select(Replica.id, Replica.state))).all())
        assert rows == {state.replica: "live", "live-1": "live"}  # the dead one's row is gone
        # The session works again on a live replica.
        again = await c.post(f"/v1/sessions/{sids[0]}/messages", json={"message": "again"})
        assert again.json()["run"]["status"] == "completed"
    finally:
        await live.close()


async def test_a_replica_with_a_stale_heartbeat_is_fenced(
    pg_app: tuple[FastAPI, httpx.AsyncClient, str],
) -> None:
    app, _, url = pg_app
    state = app.state.agentstation
    hung = await asyncpg.connect(
        _asyncpg_url(url), server_settings={"application_name": "agentstation:hung-1"}
    )
    try:
        await _replica(state, "hung-1", age_s=120)
        await state.liveness.sweep()
        # Its connections were ended: it can write nothing more (its locks are gone too).
        # How asyncpg says so depends on when the server's termination notice arrives: the
        # notice itself, a closed connection, or (arriving between two queries, seen in CI
        # under load) a protocol left mid-operation that refuses the next query.
        ended = (
            asyncpg.exceptions.AdminShutdownError,
            asyncpg.InterfaceError,
            asyncpg.exceptions.InternalClientError,
        )
        with pytest.raises(ended):
            for _ in range(50):
                await hung.execute("SELECT 1")
                await asyncio.sleep(0.05)
    finally:
        await hung.close()


async def test_a_draining_replica_takes_no_new_turns_and_is_not_ready(
    pg_app: tuple[FastAPI, httpx.AsyncClient, str],
) -> None:
    app, c, _ = pg_app
    state = app.state.agentstation
    await make_agent(c)
    sid = await make_session(c)
    state.drain.start()  # what SIGTERM does to `agentstation serve`
    ready = await c.get("/readyz")
    assert ready.status_code == 503 and "draining" in ready.json()["not_ready"]
    turn = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "x"})
    assert turn.status_code == 503 and turn.headers["retry-after"] == "1"
    assert turn.json()["error"]["code"] == "draining"
    # Its next beat says so. The heartbeat thread's first beat (state read before the drain
    # began) may still land after one beat here, so beat until the row shows it (bounded).
    status = None
    for _ in range(50):
        await state.liveness.fleet.beat(state.replica, state.liveness.state)
        async with state.sessionmaker() as db:
            status = await db.scalar(sa.select(Replica.state).where(Replica.id == state.replica))
        if status == "draining":
            break
        await asyncio.sleep(0.1)
    assert status == "draining"


async def _row(state: Any, run_id: str) -> Run:
    async with state.sessionmaker() as db:
        row: Run | None = await db.get(Run, run_id)
        assert row is not None
        return row


async def test_the_heartbeat_thread_beats_as_of_the_event_loops_last_tick(
    pg_app: tuple[FastAPI, httpx.AsyncClient, str],
) -> None:
    # The heartbeat comes from a thread with its own connection, so a busy event loop (here
    # blocked 0.3 s at a time, as a starved loop is) does not delay it; but it says "alive as
    # of the loop's last tick", so a loop that stops ticking (hung) looks dead after the TTL
    # although the thread and its connection live on.
    app, _c, _url = pg_app
    liveness = app.state.agentstation.liveness
    fleet = liveness.fleet
    tick = {"at": time.monotonic()}
    beat = fleet.heartbeat_thread("hb-1")
    assert beat is not None
    beat.start(lambda: "live", lambda: tick["at"], 0.1)
    try:
        for _ in range(12):  # ~3.6 s of a busy loop that still ticks between its blocks
            tick["at"] = time.monotonic()
            time.sleep(0.3)  # noqa: ASYNC251 (the point: a blocked event loop)
            assert "hb-1" not in {d.id for d in await fleet.dead_replicas("me", 2.0)}
        tick["at"] = time.monotonic()  # then the loop hangs: no tick any more
        dead: list[Any] = []
        for _ in range(100):
            dead = [d for d in await fleet.dead_replicas("me", 2.0) if d.id == "hb-1"]
            if dead:
                break
            await asyncio.sleep(0.1)
        assert dead and dead[0].stale  # stale although connected: fenced by a live replica
        assert time.monotonic() - tick["at"] >= 2.0
    finally:
        await asyncio.to_thread(beat.stop)
