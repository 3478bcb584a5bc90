"""SIGKILL the live service at several points of a streamed turn, then resume with every event
id the client saw (issue 18): on SQLite after a restart, on PostgreSQL on the other replica
(which takes the dead replica's run over while it is up) and after a restart.

Each resumed stream ends with the run's final event, its ids strictly increase, no id ever names
two different events (live or replayed), ids the live stream sent that were lost are covered by a
``run.gap`` event, the session's memory holds no half turn, and the session takes the next
message."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any, cast

import httpx
import pytest

from tests.app.conftest import MODELS, parse_sse
from tests.resilience.procs import Service

pytestmark = [pytest.mark.slow, pytest.mark.live]

LONG = " ".join(f"word{i}" for i in range(24))
CALL = '```json\n{"name": "Calculator", "parameters": {"expression": "6 * 7"}}\n```'
# Each turn: a tool call (one complete ``message``), its result, then LONG, streamed slowly.
CRAWL: dict[str, Any] = {
    "name": "crawl",
    "backend": "scripted",
    "replies": [CALL, LONG],
    "chunk_delay_s": 0.05,
}
SPEC = {"kind": "tool_agent", "model": "crawl", "tools": [{"name": "Calculator"}]}
TERMINAL = {"run.completed", "run.failed", "run.cancelled"}
Frame = dict[str, Any]


def reached(point: str, frames: list[Frame]) -> bool:
    """Whether the live stream reached the kill point."""
    last = frames[-1]
    if point == "created":
        return bool(last["event"] == "run.created")
    if point == "deltas":
        return sum(f["event"] == "message.delta" for f in frames) >= 3
    if point == "message":
        return bool(last["event"] == "message")
    # "end": the final answer's complete message (its run.completed is being stored).
    return bool(last["event"] == "message" and last["data"]["message"]["content"] == LONG)


def stream_and_kill(service: Service, sid: str, point: str) -> tuple[str, list[Frame]]:
    """Stream a turn on ``service``, SIGKILL it at ``point``; (run id, frames seen)."""
    frames: list[Frame] = []
    body = {"message": "compute", "stream": True, "on_disconnect": "continue"}
    with (
        service.client(timeout=30) as c,
        c.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp,
    ):
        assert resp.status_code == 200, resp.read()
        run_id = resp.headers["content-location"].rsplit("/", 1)[1]
        frame: Frame = {}
        for line in resp.iter_lines():
            if line:
                field, _, value = line.partition(":")
                frame[field] = value.strip()
                continue
            if "event" in frame:
                frame["data"] = json.loads(frame["data"])
                frames.append(frame)
                assert frame["event"] not in TERMINAL, f"the run ended before {point}"
                if reached(point, frames):
                    service.kill()
                    break
            frame = {}
        else:
            raise AssertionError(f"the stream ended before {point}: {frames}")
    return run_id, frames


def replay(c: httpx.Client, run_id: str, last_id: int) -> list[Frame]:
    """The run's events resumed after ``last_id`` (as EventSource reconnects)."""
    resp = c.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": str(last_id)})
    assert resp.status_code == 200, resp.text
    fields = ("id", "event", "data")
    return [{k: f[k] for k in fields} for f in parse_sse(resp.text) if "event" in f]


def check_resume(c: httpx.Client, run_id: str, live: list[Frame]) -> dict[str, Any]:
    """Resume with every id seen live (and from the start); returns the final run."""
    names: dict[int, tuple[str, Any]] = {}  # id -> the one event it names

    def named(frames: list[Frame]) -> None:
        for f in frames:
            event = (f["event"], f["data"])
            assert names.setdefault(int(f["id"]), event) == event, (f, names[int(f["id"])])

    named(live)
    full = replay(c, run_id, 0)
    live_ids = [int(f["id"]) for f in live]
    for last in [0, *live_ids]:
        frames = full if last == 0 else replay(c, run_id, last)
        named(frames)
        ids = [int(f["id"]) for f in frames]
        assert ids and all(b > a for a, b in zip([last, *ids], ids, strict=False)), (last, ids)
        # Every stored event after it, in order, ending with the run's final event.
        assert frames == [f for f in full if int(f["id"]) > last]
        assert frames[-1]["event"] in TERMINAL
        # Ids sent live after it and not replayed: the resumed stream says they were lost.
        gaps = [f["data"] for f in frames if f["event"] == "run.gap"]
        for lost in set(live_ids) - set(ids):
            if lost > last:
                assert any(g["from_id"] <= lost <= g["to_id"] for g in gaps), (last, lost, gaps)
    run: dict[str, Any] = full[-1]["data"]["run"]
    assert run["status"] in {"interrupted", "completed"}, run
    return run


def memory(c: httpx.Client, sid: str) -> list[tuple[str, Any]]:
    """(sender, content) of every stored message of the session."""
    resp = c.get(f"/v1/sessions/{sid}/memory")
    assert resp.status_code == 200, resp.text
    return [(m["sender"], m["content"]) for m in resp.json()["memory"]]


def turn(c: httpx.Client, sid: str) -> None:
    """A JSON turn that completes."""
    resp = c.post(f"/v1/sessions/{sid}/messages", json={"message": "compute"}, timeout=30)
    assert resp.status_code == 200 and resp.json()["run"]["status"] == "completed", resp.text


class Cluster:
    """Services on one database, started and killed by the test (all stopped at the end)."""

    def __init__(self, url: str, log_dir: Path) -> None:
        self.url, self.log_dir = url, log_dir
        self.models = [*cast(list[dict[str, Any]], MODELS), CRAWL]
        self.started: list[Service] = []

    def start(self) -> Service:
        service = Service(self.url, self.log_dir, self.models).start()
        self.started.append(service)
        return service

    def stop(self) -> None:
        for service in self.started:
            service.stop()


@contextlib.contextmanager
def cluster(url: str, log_dir: Path) -> Iterator[Cluster]:
    nodes = Cluster(url, log_dir)
    try:
        yield nodes
    finally:
        nodes.stop()


def setup_session(service: Service) -> tuple[str, list[tuple[str, Any]], int]:
    """An agent and a session with one whole turn: (session id, memory, entries per turn)."""
    with service.client(timeout=30) as c:
        assert c.post("/v1/agents", json={"name": "calc", "spec": SPEC}).status_code == 201
        sid = c.post("/v1/sessions", json={"agent": "calc"}).json()["id"]
        turn(c, sid)
        stored = memory(c, sid)
    assert stored[-1] == ("calc", LONG), stored
    return sid, stored, len(stored)


def after_crash(c: httpx.Client, sid: str, run_id: str, live: list[Frame], before: Any, per: int):
    """Resume, check memory (no half turn), take the next message; the memory now."""
    run = check_resume(c, run_id, live)
    now = memory(c, sid)
    whole = run["status"] == "completed"
    assert now[: len(before)] == before
    assert len(now) == len(before) + (per if whole else 0), (run["status"], now)
    turn(c, sid)
    after = memory(c, sid)
    assert after[: len(now)] == now and len(after) == len(now) + per
    assert after[-1] == ("calc", LONG)
    return after


POINTS = ["created", "deltas", "message", "end"]


def test_sigkill_then_restart_sqlite(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/kill.db"
    with cluster(url, tmp_path) as nodes:
        service = nodes.start()
        sid, before, per = setup_session(service)
        for point in POINTS:
            run_id, live = stream_and_kill(service, sid, point)
            service = nodes.start()  # recovers the run at start-up
            with service.client(timeout=30) as c:
                before = after_crash(c, sid, run_id, live, before, per)


@pytest.mark.postgres
def test_sigkill_one_replica_postgres(shared_pg_url: str, tmp_path: Path) -> None:
    with cluster(shared_pg_url, tmp_path) as nodes:
        live_one, other = nodes.start(), nodes.start()
        sid, before, per = setup_session(live_one)
        for i, point in enumerate(POINTS):
            run_id, live = stream_and_kill(live_one, sid, point)
            if i % 2:  # resumed on a new process: recovered at its start-up
                live_one = nodes.start()
                with live_one.client(timeout=30) as c:
                    before = after_crash(c, sid, run_id, live, before, per)
            else:  # resumed on the other replica, up all along: it takes the run over
                with other.client(timeout=30) as c:
                    before = after_crash(c, sid, run_id, live, before, per)
                live_one, other = other, nodes.start()
