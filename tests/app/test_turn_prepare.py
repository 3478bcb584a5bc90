"""A turn's agent is built while its admission is in flight (``Admissions.prepare``), and the
model is still called only once the admission succeeded: a refused admission (a busy session,
an Idempotency-Key seen before) built an agent for nothing, but never called the model and left
no run; an admitted run uses the agent built meanwhile (one build per turn, not two)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.runtime.runs import RunManager
from tests.app.conftest import make_agent, make_session


class Watch:
    """Builds, preparations and admissions of the app's turns; the admission suspends once
    before it starts (on SQLite it otherwise never does: there is nothing to overlap, so the
    preparation would not run), as PostgreSQL's round trip does."""

    def __init__(self, app: FastAPI) -> None:
        state = app.state.agentstation
        self.runs: RunManager = state.run_manager
        self.models = state.models
        self.builds = 0
        self.prepared: list[str] = []  # session ids, at the admission's suspension
        self.admitted: list[tuple[str, int]] = []  # (run id, model calls then) per admission
        build, prepare, admit = self.runs.build_agent, self.runs._prepare, self.runs.store.admit

        def counted(spec: Any, name: str | None) -> Any:
            self.builds += 1
            return build(spec, name)

        def preparing(sub: Any) -> Any:
            self.prepared.append(sub.session.id)
            return prepare(sub)

        async def admitting(lease: Any, run: Any, strategy: str) -> Any:
            await asyncio.sleep(0)
            admitted = await admit(lease, run, strategy)
            self.admitted.append((admitted.run.id, self.calls()))
            return admitted

        self.runs.build_agent = counted
        self.runs.deps.build_agent = counted
        self.runs.admissions.prepare = preparing
        self.runs.store.admit = admitting  # type: ignore[method-assign]

    def calls(self, model: str = "") -> int:
        """Model calls so far (every scripted model)."""
        total = 0
        for name in ("echo", "slow") if not model else (model,):
            handle = self.models.get(name)
            total += len(getattr(handle.llm, "inner", handle.llm).recent)
        return total


@pytest.fixture
def watch(app: FastAPI) -> Watch:
    return Watch(app)


async def _post(client: httpx.AsyncClient, sid: str, **body: Any) -> httpx.Response:
    return await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi", **body})


async def _running(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    for _ in range(1000):
        runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        if runs and runs[0]["status"] == "running":
            return dict(runs[0])
        await asyncio.sleep(0.01)
    raise AssertionError("the run never ran")


async def test_a_busy_session_refuses_without_calling_the_model(
    client: httpx.AsyncClient, watch: Watch
) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    first = asyncio.create_task(_post(client, sid))
    running = await _running(client, sid)
    assert watch.calls(model="slow") == 1 and watch.builds == 1  # built once, at admission
    refused = await _post(client, sid, multitask_strategy="reject")
    assert refused.status_code == 409 and refused.json()["error"]["code"] == "session_busy"
    # The refused turn's agent was built while its admission was in flight ...
    assert watch.prepared == [sid, sid] and watch.builds == 2
    await asyncio.sleep(0.05)
    # ... and dropped: no model call, no run.
    assert watch.calls(model="slow") == 1
    runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
    assert [r["id"] for r in runs] == [running["id"]]
    await client.post(f"/v1/runs/{running['id']}/cancel")
    await first


async def test_an_idempotent_replay_calls_the_model_once(
    client: httpx.AsyncClient, watch: Watch
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    headers = {"Idempotency-Key": "prepared-1"}
    one = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"}, headers=headers)
    two = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"}, headers=headers)
    assert one.json()["run"]["id"] == two.json()["run"]["id"]
    assert one.json()["message"]["content"] == "x"
    assert watch.prepared == [sid, sid] and watch.builds == 2
    assert watch.calls() == 1  # the replay's agent never ran


async def test_an_admitted_turn_runs_the_agent_built_during_its_admission(
    client: httpx.AsyncClient, watch: Watch
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    for k in range(3):
        resp = await _post(client, sid, message=f"m{k}")
        assert resp.json()["message"]["content"] == f"m{k}"
    streamed = await _post(client, sid, message="m3", stream=True)
    assert "run.completed" in streamed.text
    # One build per turn (the run did not build another), and no turn's model call had
    # started when its admission returned.
    assert watch.builds == 4 and len(watch.prepared) == 4
    assert [calls for _run, calls in watch.admitted] == [0, 1, 2, 3]
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["m0", "m0", "m1", "m1", "m2", "m2", "m3", "m3"]
