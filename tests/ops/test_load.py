"""Load: 200 concurrent sessions for 60 s on the scripted model against PostgreSQL — no errors,
and every session's memory holds exactly its own messages, in order."""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Iterator

import httpx
import pytest

from app.db.migrate import upgrade
from tests.ops.faults import PrivatePostgres, ServiceProcess

pytestmark = [pytest.mark.live, pytest.mark.slow, pytest.mark.postgres]
KEY = "load-key"
AUTH = {"Authorization": f"Bearer {KEY}"}
SESSIONS = int(os.environ.get("AGENTSTATION_LOAD_SESSIONS", "200"))
DURATION_S = float(os.environ.get("AGENTSTATION_LOAD_SECONDS", "60"))


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    pg = PrivatePostgres()
    try:
        pg.start()
        upgrade(pg.url)
        yield pg
    finally:
        pg.destroy()


async def session_worker(
    c: httpx.AsyncClient, sid: str, deadline: float, errors: list[str]
) -> list[str]:
    """Send numbered messages until the deadline; return the texts that were answered."""
    sent: list[str] = []
    n = 0
    while time.monotonic() < deadline:
        n += 1
        text = f"{sid} message {n}"
        try:
            resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": text})
        except httpx.HTTPError as exc:
            errors.append(f"{sid}#{n}: {type(exc).__name__}: {exc}")
            return sent
        if resp.status_code != 200 or resp.json()["message"]["content"] != text:
            errors.append(f"{sid}#{n}: {resp.status_code} {resp.text[:200]}")
            return sent
        sent.append(text)
    return sent


async def test_concurrent_sessions_keep_exactly_their_own_messages(
    postgres: PrivatePostgres,
) -> None:
    svc = ServiceProcess(
        {
            "AGENTSTATION_DATABASE_URL": postgres.url,
            "AGENTSTATION_MODELS": json.dumps([{"name": "echo", "backend": "scripted"}]),
            "AGENTSTATION_API_KEYS": f"t:{KEY}",
            "AGENTSTATION_SANDBOX_ENABLED": "false",
            "AGENTSTATION_LOG_LEVEL": "WARNING",
        }
    )
    svc.start()
    limits = httpx.Limits(max_connections=SESSIONS, max_keepalive_connections=SESSIONS)
    try:
        async with httpx.AsyncClient(
            base_url=svc.base_url, headers=AUTH, timeout=120, limits=limits
        ) as c:
            spec = {"kind": "agent", "model": "echo"}
            assert (await c.post("/v1/agents", json={"name": "e", "spec": spec})).is_success
            ids = [f"load-{i}" for i in range(SESSIONS)]
            for sid in ids:
                assert (await c.post("/v1/sessions", json={"agent": "e", "id": sid})).is_success
            errors: list[str] = []
            deadline = time.monotonic() + DURATION_S
            sent = await asyncio.gather(*(session_worker(c, s, deadline, errors) for s in ids))
            assert errors == [], errors[:10]
            for sid, texts in zip(ids, sent, strict=True):
                memory = (await c.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
                # user, reply, user, reply…: exactly this session's texts, in order, once each.
                assert [m["content"] for m in memory] == [t for t in texts for _ in (0, 1)]
                assert [m["sender"] for m in memory[::2]] == ["user"] * len(texts)
            total = sum(len(t) for t in sent)
            print(f"load: {SESSIONS} sessions, {total} turns in {DURATION_S:.0f} s")
            assert all(sent), "a session never got a turn through"
    finally:
        svc.stop()
