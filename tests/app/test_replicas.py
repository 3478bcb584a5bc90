"""Two replicas on one PostgreSQL: resume a stream and cancel a run from the other replica."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from tests.app.conftest import (
    make_agent,
    make_session,
    parse_sse,
)

pytestmark = pytest.mark.postgres


async def _running(client: httpx.AsyncClient, sid: str) -> str:
    for _ in range(500):
        runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        if runs and runs[0]["status"] == "running":
            return str(runs[0]["id"])
        await asyncio.sleep(0.01)
    raise AssertionError("the run never started")


async def test_other_replica_follows_rejects_and_cancels(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    c1, c2 = replicas
    await make_agent(c1, model="slow")
    sid = await make_session(c1)
    first = asyncio.create_task(c1.post(f"/v1/sessions/{sid}/messages", json={"message": "go"}))
    run_id = await _running(c1, sid)
    # The session is busy on every replica (the check is in the shared database).
    busy = await c2.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
    assert busy.status_code == 409
    follower = asyncio.create_task(c2.get(f"/v1/runs/{run_id}/events", params={"after": 1}))
    await asyncio.sleep(0.5)
    started = time.monotonic()
    cancelled = await c2.post(f"/v1/runs/{run_id}/cancel")
    assert time.monotonic() - started < 1.5
    assert cancelled.json()["status"] == "cancelled"
    assert (await first).json()["run"]["status"] == "cancelled"
    frames = [f for f in parse_sse((await follower).text) if "event" in f]
    assert frames[0]["id"] == "2" and frames[-1]["event"] == "run.cancelled"
    assert any(f["event"] == "message.delta" for f in frames)


async def test_a_turn_sent_to_another_replica_waits_for_the_running_one(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    c1, c2 = replicas
    await make_agent(c1, model="slow")
    sid = await make_session(c1)
    first = asyncio.create_task(c1.post(f"/v1/sessions/{sid}/messages", json={"message": "go"}))
    await _running(c1, sid)
    body = {"message": "then", "multitask_strategy": "enqueue"}
    second = (await c2.post(f"/v1/sessions/{sid}/messages", json=body)).json()["run"]
    one = (await first).json()["run"]
    assert one["status"] == second["status"] == "completed"
    # Replica two's run held the session only after replica one's run had stored its end.
    assert second["started_at"] >= one["finished_at"]
    memory = (await c2.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory if m["sender"] == "user"] == ["go", "then"]
    assert len(memory) == 4


async def test_a_cancelled_run_frees_the_session_on_every_replica(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    c1, c2 = replicas
    await make_agent(c1, model="slow")
    sid = await make_session(c1)
    first = asyncio.create_task(c1.post(f"/v1/sessions/{sid}/messages", json={"message": "go"}))
    run_id = await _running(c1, sid)
    assert (await c2.post(f"/v1/runs/{run_id}/cancel")).json()["status"] == "cancelled"
    assert (await first).json()["run"]["status"] == "cancelled"
    started = time.monotonic()
    again = await c2.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
    assert again.status_code == 200 and again.json()["run"]["status"] == "completed"
    assert time.monotonic() - started < 5  # a 2 s turn, not stuck behind a lock left held
