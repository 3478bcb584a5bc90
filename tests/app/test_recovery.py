"""Start-up recovery of runs left by a dead process; SSE pings; delta coalescing."""

from __future__ import annotations

import json
from collections.abc import Callable

import httpx

from app.db.base import utcnow
from app.db.models import SEQ_BLOCK, Run, RunEvent
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent, make_session, parse_sse
from tests.lifespan import LifespanManager

AUTH = {"Authorization": f"Bearer {KEY_A}"}


def _client(app: object) -> httpx.AsyncClient:
    transport = httpx.ASGITransport(app=app)  # type: ignore[arg-type]
    return httpx.AsyncClient(transport=transport, base_url="http://t", headers=AUTH)


async def test_runs_left_running_become_interrupted(
    settings_factory: Callable[..., Settings],
) -> None:
    app = create_app(settings_factory())
    async with LifespanManager(app), _client(app) as c:
        await make_agent(c)
        sid = await make_session(c)
        done = (await c.post(f"/v1/sessions/{sid}/messages", json={"message": "x"})).json()["run"]
        state = app.state.agentstation
        async with state.sessionmaker() as db, db.begin():
            row = await db.get(Run, done["id"])
            assert row is not None
            # What a process killed mid-run leaves behind.
            db.add(
                Run(
                    id="run_stale",
                    tenant_id="a",
                    session_pk=row.session_pk,
                    session_id=sid,
                    agent="helper",
                    agent_version=1,
                    status="running",
                    input={"content": "y"},
                    options={},
                    prompt_tokens=0,
                    completion_tokens=0,
                    created_at=utcnow(),
                    started_at=utcnow(),
                )
            )
            await db.flush()
            # Two events stored; it may have sent more (ids up to SEQ_BLOCK are reserved).
            for seq, type_ in ((1, "run.created"), (2, "message.delta")):
                db.add(RunEvent(run_id="run_stale", seq=seq, type=type_, data={"n": seq}))
    restarted = create_app(settings_factory())
    async with LifespanManager(restarted), _client(restarted) as c:
        run = (await c.get("/v1/runs/run_stale")).json()
        assert run["status"] == "interrupted" and run["stop_reason"] == "server_restart"
        frames = parse_sse((await c.get("/v1/runs/run_stale/events")).text)
        events = [(int(f["id"]), f["event"]) for f in frames if "event" in f]
        gap, end = SEQ_BLOCK + 1, SEQ_BLOCK + 2  # numbered after every id it may have sent
        assert events == [
            (1, "run.created"),
            (2, "message.delta"),
            (gap, "run.gap"),
            (end, "run.cancelled"),
        ]
        assert frames[2]["data"] == {"from_id": 3, "to_id": SEQ_BLOCK, "reason": "server_restart"}
        # A client that saw id 5 live (never stored) learns that the run ended, and how.
        resumed = await c.get("/v1/runs/run_stale/events", headers={"Last-Event-ID": "5"})
        frames = [f for f in parse_sse(resumed.text) if "event" in f]
        assert [(int(f["id"]), f["event"]) for f in frames] == events[2:]
        # The session takes new messages again.
        resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "z"})
        assert resp.json()["run"]["status"] == "completed"
        assert (await c.get(f"/v1/runs/{done['id']}")).json()["status"] == "completed"
        # The finished run's events come back from the database after the restart.
        replay = parse_sse((await c.get(f"/v1/runs/{done['id']}/events")).text)
        events = [f for f in replay if "event" in f]
        assert events[0]["event"] == "run.created" and events[-1]["event"] == "run.completed"
        assert [int(f["id"]) for f in events] == list(range(1, len(events) + 1))
        assert any(f["event"] == "message.delta" for f in events)


async def test_pings_and_coalesced_deltas(settings_factory: Callable[..., Settings]) -> None:
    app = create_app(settings_factory(sse_ping_s=0.05, event_flush_s=0.5))
    async with LifespanManager(app), _client(app) as c:
        await make_agent(c, model="slow")
        sid = await make_session(c)
        resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "x", "stream": True})
        frames = parse_sse(resp.text)
    assert any(f.get("comment") == "ping" for f in frames)
    deltas = [f["data"]["delta"] for f in frames if f.get("event") == "message.delta"]
    assert "".join(deltas) == "one two three four five six seven eight nine ten"
    assert 2 <= len(deltas) < 10  # ten words, merged into a few events


async def test_a_long_stream_reserves_more_event_ids(
    settings_factory: Callable[..., Settings],
) -> None:
    words = " ".join(f"w{i}" for i in range(SEQ_BLOCK * 2))
    many = {"name": "many", "backend": "scripted", "replies": [words], "chunk_delay_s": 0.003}
    # Deltas are not merged (flushes far shorter than the gap between words): one event each.
    settings = settings_factory(models=json.dumps([many]), event_flush_s=0.0005)
    app = create_app(settings)
    async with LifespanManager(app), _client(app) as c:
        await make_agent(c, model="many")
        sid = await make_session(c)
        resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "x", "stream": True})
        frames = [f for f in parse_sse(resp.text) if "event" in f]
        ids = [int(f["id"]) for f in frames]
        assert ids == list(range(1, len(ids) + 1)) and len(ids) > SEQ_BLOCK + 16
        deltas = "".join(f["data"]["delta"] for f in frames if f["event"] == "message.delta")
        assert deltas == words
        async with app.state.agentstation.sessionmaker() as db:
            run = await db.get(Run, frames[-1]["data"]["run"]["id"])
        # Raised before the ids past the first block were sent.
        assert run is not None and run.seq_reserved >= len(ids) - 1 > SEQ_BLOCK
        # A turn nobody follows live reserves nothing past the first block, which its
        # admission stored (PostgreSQL's through the column default): what the channel assumes.
        done = (await c.post(f"/v1/sessions/{sid}/messages", json={"message": "x"})).json()
        async with app.state.agentstation.sessionmaker() as db:
            quiet = await db.get(Run, done["run"]["id"])
        assert quiet is not None and quiet.seq_reserved == SEQ_BLOCK
