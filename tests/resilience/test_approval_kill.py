"""A run waiting for approval survives a SIGKILL of its server: after a restart (or on a second
replica) it still waits, approving it completes it, and its whole event log replays in order."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, cast

import pytest

from tests.app.conftest import MODELS, parse_sse
from tests.app.test_approvals import CALC, SPEC
from tests.resilience.procs import Service

pytestmark = [pytest.mark.slow, pytest.mark.live]


def _models(restarted: bool = False) -> list[dict[str, Any]]:
    """The models; a scripted model's script restarts with its process: a server that takes
    a waiting run over goes on with the answer (the call was the first server's)."""
    calc = {**CALC, "replies": CALC["replies"][::-1]} if restarted else CALC
    return [*cast(list[dict[str, Any]], MODELS), calc]


def _wait_then_kill(service: Service) -> tuple[str, str, list[dict[str, Any]]]:
    """A run streamed to its pause, then SIGKILL; (session id, run id, the live events)."""
    with service.client(timeout=30) as c:
        assert c.post("/v1/agents", json={"name": "calc", "spec": SPEC}).status_code == 201
        sid = c.post("/v1/sessions", json={"agent": "calc"}).json()["id"]
        resp = c.post(f"/v1/sessions/{sid}/messages", json={"message": "6*7?", "stream": True})
        live = [f for f in parse_sse(resp.text) if "event" in f]
    assert live[-1]["event"] == "run.requires_action", live
    service.kill()
    return sid, live[-1]["data"]["run"]["id"], live


def _approve_on(service: Service, sid: str, run_id: str, live: list[dict[str, Any]]) -> None:
    with service.client(timeout=30) as c:
        run = c.get(f"/v1/runs/{run_id}").json()
        assert run["status"] == "requires_action", run  # a restart leaves it waiting
        call = run["required_action"]["tool_calls"][0]
        assert call["arguments"] == {"expression": "6 * 7"}
        # While it waits, the session stays busy on the restarted server too.
        busy = c.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
        assert busy.status_code == 409, busy.text
        decision = {"decisions": [{"id": call["id"], "action": "approve"}]}
        resp = c.post(f"/v1/runs/{run_id}/resume", json=decision)
        assert resp.status_code == 202, resp.text
        for _ in range(200):
            run = c.get(f"/v1/runs/{run_id}").json()
            if run["status"] == "completed":
                break
            time.sleep(0.05)
        assert run["status"] == "completed" and run["output"]["content"] == "The answer is 42."
        full = [f for f in parse_sse(c.get(f"/v1/runs/{run_id}/events").text) if "event" in f]
        memory = c.get(f"/v1/sessions/{sid}/memory").json()["memory"]
    ids = [int(f["id"]) for f in full]
    assert ids == list(range(1, len(ids) + 1)), ids  # in order, nothing lost, no gap
    strip = [{k: f[k] for k in ("id", "event", "data")} for f in live]
    assert [{k: f[k] for k in ("id", "event", "data")} for f in full[: len(live)]] == strip
    types = [f["event"] for f in full]
    assert "run.gap" not in types and types[-1] == "run.completed"
    assert [m["sender"] for m in memory] == ["user", "calc", "AsyncActionExecutor", "calc"]
    assert "42" in str(memory[2]["content"])


def test_sigkill_while_waiting_sqlite(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/approve.db"
    first = Service(url, tmp_path, _models()).start()
    second: Service | None = None
    try:
        sid, run_id, live = _wait_then_kill(first)
        second = Service(url, tmp_path, _models(restarted=True)).start()
        _approve_on(second, sid, run_id, live)
    finally:
        first.stop()
        if second is not None:
            second.stop()


@pytest.mark.postgres
def test_sigkill_while_waiting_other_replica_postgres(shared_pg_url: str, tmp_path: Path) -> None:
    one = Service(shared_pg_url, tmp_path, _models()).start()
    two = Service(shared_pg_url, tmp_path, _models(restarted=True)).start()
    try:
        sid, run_id, live = _wait_then_kill(one)
        _approve_on(two, sid, run_id, live)  # the replica that was up all along
    finally:
        one.stop()
        two.stop()


def test_a_deadline_passes_across_a_restart(tmp_path: Path) -> None:
    """``approval.timeout_s`` runs out while no server is up: the next one denies the call."""
    url = f"sqlite+aiosqlite:///{tmp_path}/deadline.db"
    first = Service(url, tmp_path, _models()).start()
    second: Service | None = None
    try:
        with first.client(timeout=30) as c:
            spec = {**SPEC, "approval": {"tools": "all", "timeout_s": 1}}
            assert c.post("/v1/agents", json={"name": "calc", "spec": spec}).status_code == 201
            sid = c.post("/v1/sessions", json={"agent": "calc"}).json()["id"]
            run = c.post(f"/v1/sessions/{sid}/messages", json={"message": "6*7?"}).json()["run"]
        assert run["status"] == "requires_action"
        first.kill()
        time.sleep(1.5)  # the deadline passes with no server up
        second = Service(url, tmp_path, _models(restarted=True)).start()
        with second.client(timeout=30) as c:
            for _ in range(200):
                run = c.get(f"/v1/runs/{run['id']}").json()
                if run["status"] == "completed":
                    break
                time.sleep(0.05)
            memory = c.get(f"/v1/sessions/{sid}/memory").json()["memory"]
        assert run["status"] == "completed", run
        assert "in time" in str(memory[2]["content"])  # the model read the denial
    finally:
        first.stop()
        if second is not None:
            second.stop()
