"""Token budgets on the real gateway: a run stops at a model-call boundary, then 429s."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from app.cli import main as cli_main
from app.db.migrate import upgrade
from app.main import create_app
from tests.app.conftest import KEY_A, MODELS, make_agent, make_session, make_settings
from tests.lifespan import LifespanManager

CALL = '```json\n{"name": "Calculator", "parameters": {"expression": "6 * 7"}}\n```\n'
TOOL_MODELS = [*MODELS, {"name": "caller", "backend": "scripted", "replies": [CALL, "It is 42."]}]


@pytest.fixture
async def database_url(tmp_path: Path) -> str:
    url = f"sqlite+aiosqlite:///{tmp_path / 'budget.db'}"
    await asyncio.to_thread(upgrade, url)
    return url


@pytest.fixture
async def app(database_url: str) -> AsyncIterator[FastAPI]:
    application = create_app(make_settings(database_url, models=json.dumps(TOOL_MODELS)))
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        yield c


async def send(client: httpx.AsyncClient, sid: str, text: str) -> httpx.Response:
    return await client.post(f"/v1/sessions/{sid}/messages", json={"message": text})


async def test_session_budget_stops_the_run_at_the_next_model_call_and_keeps_its_work(
    client: httpx.AsyncClient,
) -> None:
    await make_agent(
        client,
        "calc",
        model="caller",
        kind="tool_agent",
        tools=[{"name": "Calculator"}],
        budget={"max_total_tokens": 5},
    )
    sid = await make_session(client, "calc")
    resp = await send(client, sid, "What is 6 * 7?")
    assert resp.status_code == 200, resp.text
    run = resp.json()["run"]
    # The first model call (tool call) used more than 5 tokens; the second never happened.
    assert run["status"] == "completed"
    assert run["stop_reason"] == "budget_exceeded"
    assert run["usage"]["total_tokens"] >= 5
    # The session shows its usage: the sum over its runs.
    session = (await client.get(f"/v1/sessions/{sid}")).json()
    assert session["usage"] == run["usage"]
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    contents = json.dumps(memory)
    assert "What is 6 * 7?" in contents
    assert "Calculator" in contents and "42" in contents  # the tool call and its result
    assert "It is 42." not in contents  # the reply the budget prevented
    # The spent session refuses new messages up front.
    again = await send(client, sid, "And 7 * 8?")
    assert again.status_code == 429
    error = again.json()["error"]
    assert error["code"] == "budget_exceeded" and "session token budget" in error["message"]
    assert again.headers["x-should-retry"] == "false"
    # A new session of the same agent has its own budget.
    fresh = await make_session(client, "calc")
    assert (await send(client, fresh, "What is 6 * 7?")).status_code == 200


async def test_tenant_budget_from_the_cli_covers_all_sessions(
    client: httpx.AsyncClient, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSTATION_DATABASE_URL", database_url)
    assert (
        await asyncio.to_thread(
            cli_main, ["keys", "create", "--tenant", "a", "--token-budget", "3"]
        )
        == 0
    )
    await make_agent(client, "echoer", model="echo")
    first, second = await make_session(client, "echoer"), await make_session(client, "echoer")
    # A stateless chat completion on the agent counts against the tenant too.
    chat = {"model": "echoer", "messages": [{"role": "user", "content": "one two three four"}]}
    done = await client.post("/v1/chat/completions", json=chat)
    assert done.status_code == 200, done.text
    for sid in (first, second):
        refused = await send(client, sid, "more")
        assert refused.status_code == 429
        assert "tenant token budget exhausted" in refused.json()["error"]["message"]
    assert (await client.post("/v1/chat/completions", json=chat)).status_code == 429
    metrics = (await client.get("/metrics")).text
    assert 'agentstation_budget_exceeded_total{scope="tenant"} 3.0' in metrics


def test_budget_in_a_spec_is_validated() -> None:
    from app.schemas.agents import AgentSpec

    spec = {"model": "m", "budget": {"max_total_tokens": 10}}
    assert AgentSpec.model_validate(spec).budget is not None
    for bad in ({"max_total_tokens": 0}, {"max_total_tokens": "x"}, {"tokens": 5}):
        with pytest.raises(ValueError, match="budget"):
            AgentSpec.model_validate({"model": "m", "budget": bad})
