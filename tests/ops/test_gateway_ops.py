"""Ops on the real gateway: metrics after real runs, per-key rate limits, request ids in logs."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client.parser import text_string_to_metric_families

from app.db.migrate import upgrade
from app.main import create_app
from tests.app.conftest import KEY_A, KEY_B, make_agent, make_session, make_settings
from tests.lifespan import LifespanManager


@pytest.fixture
async def database_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'ops.db'}"
    await asyncio.to_thread(upgrade, url)
    return url


@pytest.fixture(autouse=True)
def restore_logging() -> Iterator[None]:
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    yield
    root.handlers[:] = before[0]
    root.setLevel(before[1])


@pytest.fixture
async def started(database_url: str, request: pytest.FixtureRequest) -> AsyncIterator[FastAPI]:
    overrides: dict[str, Any] = getattr(request, "param", {})
    app = create_app(make_settings(database_url, **overrides))
    async with LifespanManager(app):
        yield app


def client(app: FastAPI, key: str = KEY_A) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://test",
        headers={"Authorization": f"Bearer {key}"},
    )


def metric(text: str, name: str, **labels: str) -> float:
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and sample.labels == labels:
                return float(sample.value)
    raise AssertionError(f"{name}{labels} not exported")


async def test_metrics_reflect_real_runs_models_and_routes(started: FastAPI) -> None:
    async with client(started) as c:
        await make_agent(c, model="poet")
        sid = await make_session(c)
        for text in ("hi", "again"):
            resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": text})
            assert resp.status_code == 200, resp.text
            assert resp.headers["x-request-id"]
        # A raw model request (no agent) is measured too.
        chat = {"model": "poet", "messages": [{"role": "user", "content": "hi"}]}
        raw = await c.post("/v1/chat/completions", json=chat)
        assert raw.status_code == 200, raw.text
        raw_completion = raw.json()["usage"]["completion_tokens"]
        scraped = await c.get("/metrics", headers={"Authorization": ""})
    assert scraped.status_code == 200
    text = scraped.text
    route = "/v1/sessions/{session_id}/messages"
    assert (
        metric(text, "agentstation_http_requests_total", method="POST", route=route, status="200")
        == 2
    )
    assert metric(text, "agentstation_runs_total", status="completed") == 2
    assert metric(text, "agentstation_run_duration_seconds_count", status="completed") == 2
    # The scripted model counts words: "Roses are red." then "Violets are blue." = 3 + 3,
    # plus the raw request's reply.
    completion = metric(text, "agentstation_tokens_total", model="poet", kind="completion")
    assert raw_completion > 0 and completion == 6 + raw_completion
    assert metric(text, "agentstation_time_to_first_token_seconds_count", model="poet") == 2
    assert metric(text, "agentstation_runs_queued") == 0
    assert metric(text, "agentstation_runs_active") == 0
    assert metric(text, "agentstation_db_pool_connections", state="checked_out") >= 0


@pytest.mark.parametrize("started", [{"rate_limit": "3/minute"}], indirect=True)
async def test_rate_limit_is_per_api_key_on_the_gateway(started: FastAPI) -> None:
    async with client(started, KEY_A) as a, client(started, KEY_B) as b:
        statuses = [(await a.get("/v1/agents")).status_code for _ in range(4)]
        other = await b.get("/v1/agents")
        health = [(await a.get("/healthz")).status_code for _ in range(3)]
        limited = await a.get("/v1/models")
    assert statuses == [200, 200, 200, 429]
    assert other.status_code == 200
    assert health == [200, 200, 200]
    assert limited.status_code == 429
    assert int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limit_exceeded"


async def test_json_logs_of_a_run_carry_request_and_run_ids(
    database_url: str,
) -> None:
    app = create_app(make_settings(database_url, log_format="json"))
    stream = io.StringIO()
    async with LifespanManager(app):
        handler = logging.getLogger().handlers[-1]
        assert isinstance(handler, logging.StreamHandler)
        handler.setStream(stream)
        async with client(app) as c:
            await make_agent(c, model="echo")
            sid = await make_session(c)
            resp = await c.post(
                f"/v1/sessions/{sid}/messages",
                json={"message": "hello"},
                headers={"x-request-id": "req-ops-1"},
            )
            assert resp.status_code == 200
            run_id = resp.json()["run"]["id"]
            logging.getLogger("agentstation.test").info("after the run")
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert all({"request_id", "run_id"} <= e.keys() for e in entries)
    in_run = [e for e in entries if e["run_id"] == run_id]
    assert in_run, entries
    assert all(e["request_id"] == "req-ops-1" for e in in_run)
    assert resp.headers["x-request-id"] == "req-ops-1"
