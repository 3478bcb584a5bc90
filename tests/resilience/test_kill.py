"""SIGKILL the live service mid-run on PostgreSQL and restart it: the run is ``interrupted``,
the session's memory holds no half turn, and the run's stored events replay."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from tests.app.conftest import MODELS, parse_sse
from tests.resilience.procs import Service, running

pytestmark = [pytest.mark.slow, pytest.mark.live, pytest.mark.postgres]

LONG = " ".join(f"word{i}" for i in range(40))
# The first call answers at once; the second streams 40 words over about four seconds.
CRAWL: dict[str, Any] = {
    "name": "crawl",
    "backend": "scripted",
    "replies": ["Ready.", LONG],
    "chunk_delay_s": 0.1,
}


def contents(memory: dict[str, Any]) -> list[tuple[str, Any]]:
    """(sender, content) of every stored message."""
    return [(m["sender"], m["content"]) for m in memory["memory"]]


def stream_until_deltas(c: httpx.Client, sid: str, count: int) -> tuple[str, str]:
    """Start a streamed run and read until ``count`` deltas arrived; (run id, text seen)."""
    text = ""
    seen = 0
    body = {"message": "tell me everything", "stream": True, "on_disconnect": "continue"}
    with c.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
        assert resp.status_code == 200, resp.read()
        run_id = resp.headers["content-location"].rsplit("/", 1)[1]
        event = ""
        for line in resp.iter_lines():
            if line.startswith("event:"):
                event = line.split(":", 1)[1].strip()
            elif line.startswith("data:") and event == "message.delta":
                text += json.loads(line[5:])["delta"]
                seen += 1
                if seen >= count:
                    return run_id, text
    raise AssertionError(f"the run ended before {count} deltas: {text!r}")


def test_sigkill_mid_run_then_restart(shared_pg_url: str, tmp_path: Path) -> None:
    models = [*cast(list[dict[str, Any]], MODELS), CRAWL]
    with running(Service(shared_pg_url, tmp_path, models)) as first, first.client() as c:
        spec = {"kind": "agent", "model": "crawl"}
        assert c.post("/v1/agents", json={"name": "writer", "spec": spec}).status_code == 201
        sid = c.post("/v1/sessions", json={"agent": "writer"}).json()["id"]
        done = c.post(f"/v1/sessions/{sid}/messages", json={"message": "hello"})
        assert done.status_code == 200 and done.json()["run"]["status"] == "completed"
        before = contents(c.get(f"/v1/sessions/{sid}/memory").json())
        assert before == [("user", "hello"), ("writer", "Ready.")]

        run_id, seen = stream_until_deltas(c, sid, count=5)
        time.sleep(0.3)  # past the event flush interval: what we saw is stored
        assert c.get(f"/v1/runs/{run_id}").json()["status"] == "running"
        first.kill()

    with running(Service(shared_pg_url, tmp_path, models)) as second, second.client() as c:
        run = c.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "interrupted", run
        assert run["finished_at"] is not None
        # No half turn: neither the user message nor the partial reply reached memory.
        assert contents(c.get(f"/v1/sessions/{sid}/memory").json()) == before

        frames = [f for f in parse_sse(c.get(f"/v1/runs/{run_id}/events").text) if "event" in f]
        ids = [int(f["id"]) for f in frames]
        assert ids == list(range(1, len(ids) + 1)), ids
        assert frames[0]["event"] == "run.created"
        assert frames[-1]["event"] in {"run.cancelled", "run.failed"}
        assert frames[-1]["data"]["run"]["status"] == "interrupted"
        replayed = "".join(f["data"]["delta"] for f in frames if f["event"] == "message.delta")
        assert replayed.startswith(seen) and LONG.startswith(replayed), (seen, replayed)
        # Resume after a given event, as a client that lost its connection does.
        resumed = parse_sse(c.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": "2"}).text)
        assert [int(f["id"]) for f in resumed if "event" in f] == ids[2:]

        # The session is free again and its next turn lands right after the completed one.
        again = c.post(f"/v1/sessions/{sid}/messages", json={"message": "once more"})
        assert again.status_code == 200 and again.json()["run"]["status"] == "completed"
        after = contents(c.get(f"/v1/sessions/{sid}/memory").json())
        assert after[:2] == before and [m[0] for m in after[2:]] == ["user", "writer"]
        assert after[2] == ("user", "once more")
