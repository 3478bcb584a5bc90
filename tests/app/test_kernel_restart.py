"""A session's kernel is never lost silently: a tool call that starts a fresh kernel where the
session had one (on another replica, or stopped here) says so with ``kernel.restarted`` and in
the tool's output; a reset is no restart."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from app.db.models import SessionKernel
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODELS, parse_sse, sandboxed_client

pytestmark = pytest.mark.kernel


def _call(code: str) -> str:
    body = {"name": "IPythonInteractive", "parameters": {"command": code}}
    return f"```json\n{json.dumps(body)}\n```\n"


# One session, turn after turn: each turn runs one cell, then answers.
REPLIES = [_call("x = 7"), "set", *[_call("print(x)"), "read"] * 4]


@pytest.fixture
async def served(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch, base_dir: Path
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    monkeypatch.setenv("AGENTSTATION_SANDBOX_BASE_DIR", str(base_dir))
    models = [*MODELS, {"name": "coder", "backend": "scripted", "replies": REPLIES}]
    app = create_app(settings_factory(models=json.dumps(models), sandbox_enabled=True))
    async with sandboxed_client(app) as c:
        yield app, c


async def _turn(c: httpx.AsyncClient, sid: str) -> tuple[list[dict[str, Any]], str]:
    """One streamed turn: its events and the tool's output."""
    resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "go", "stream": True})
    events = [f for f in parse_sse(resp.text) if "event" in f]
    assert events[-1]["event"] == "run.completed", resp.text
    memory = (await c.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    return events, str(memory[-2]["content"])


def _restarts(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["data"] for e in events if e["event"] == "kernel.restarted"]


async def test_a_fresh_kernel_where_the_session_had_one_is_reported(
    served: tuple[FastAPI, httpx.AsyncClient],
) -> None:
    app, c = served
    state = app.state.agentstation
    spec = {"kind": "tool_agent", "model": "coder", "tools": [{"name": "IPythonInteractive"}]}
    assert (await c.post("/v1/agents", json={"name": "py", "spec": spec})).is_success
    sid = (await c.post("/v1/sessions", json={"agent": "py"})).json()["id"]
    key = f"a:{sid}"
    events, _ = await _turn(c, sid)
    assert _restarts(events) == []  # the session's first kernel
    events, out = await _turn(c, sid)
    assert _restarts(events) == [] and "7" in out  # the same kernel
    # The session moved: its kernel lived on another replica, none is here.
    async with state.sessionmaker() as db, db.begin():
        await db.execute(sa.update(SessionKernel).values(owner="other-replica/p1-k1"))
    await state.kernel_pool.shutdown_session(key)
    events, out = await _turn(c, sid)
    assert _restarts(events) == [{"agent": "default", "reason": "replica_changed"}]
    assert "NameError" in out and "kernel was restarted" in out  # the model is told too
    kinds = [e["event"] for e in events]
    # Reported where it happened: after the tool call's message, before the run's end.
    assert kinds.index("kernel.restarted") < kinds.index("run.completed")
    # Stopped on this replica (idle timeout, eviction, crash): reported as such.
    await state.kernel_pool.shutdown_session(key)
    events, _ = await _turn(c, sid)
    assert _restarts(events) == [{"agent": "default", "reason": "kernel_stopped"}]
    # A reset asks for a fresh kernel: nothing to report.
    assert (await c.post(f"/v1/sessions/{sid}/reset")).status_code == 200
    events, _ = await _turn(c, sid)
    assert _restarts(events) == []
