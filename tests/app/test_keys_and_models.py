"""API keys can be listed and revoked, may be limited to some raw models, and raw-model calls
are charged to the tenant and checked against its budget like agents (issue 12, defects 9-10)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack
from typing import Any

import httpx
import pytest

from app import cli
from app.main import create_app
from app.ops.budget_store import tenant_budget
from app.settings import Settings
from tests.app.conftest import make_agent
from tests.lifespan import LifespanManager


def run_cli(args: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    assert cli.main(args) == 0
    return capsys.readouterr().out


@pytest.fixture
async def replicas(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[list[httpx.AsyncClient]]:
    """Two replicas on one database, keys from the CLI only, a 1 s auth cache."""
    settings = settings_factory(api_keys="", auth_cache_ttl_s=1.0, host="0.0.0.0")
    monkeypatch.setenv("AGENTSTATION_DATABASE_URL", settings.database_url)
    monkeypatch.setenv("AGENTSTATION_AUTH_CACHE_TTL_S", "1")
    async with AsyncExitStack() as stack:
        clients = []
        for n in range(2):
            app = create_app(settings)
            await stack.enter_async_context(LifespanManager(app))
            transport = httpx.ASGITransport(app=app)
            clients.append(
                await stack.enter_async_context(
                    httpx.AsyncClient(transport=transport, base_url=f"http://r{n}")
                )
            )
        yield clients


def chat(model: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "two words"}], **extra}


async def test_keys_are_listed_and_revoked_on_every_replica(
    replicas: list[httpx.AsyncClient], capsys: pytest.CaptureFixture[str]
) -> None:
    key = (await asyncio.to_thread(run_cli, ["keys", "create", "--tenant", "team"], capsys)).strip()
    other = await asyncio.to_thread(
        run_cli, ["keys", "create", "--tenant", "else", "--models", "poet,echo"], capsys
    )
    auth = {"Authorization": f"Bearer {key}"}
    for c in replicas:
        assert (await c.get("/v1/agents", headers=auth)).status_code == 200
    listing = await asyncio.to_thread(run_cli, ["keys", "list"], capsys)
    lines = [line.split("\t") for line in listing.strip().splitlines()]
    assert lines[0] == ["id", "tenant", "prefix", "models", "created", "revoked"]
    rows = {row[1]: row for row in lines[1:]}
    assert rows["team"][3] == "*" and rows["else"][3] == "poet,echo"
    assert rows["team"][5] == "-" and key not in listing and other.strip() not in listing
    assert rows["team"][2].startswith(key[:8])
    only = await asyncio.to_thread(run_cli, ["keys", "list", "--tenant", "else"], capsys)
    assert len(only.strip().splitlines()) == 2
    out = await asyncio.to_thread(run_cli, ["keys", "revoke", rows["team"][0]], capsys)
    assert "revoked" in out and "within 1 s" in out
    await asyncio.sleep(1.1)  # the documented bound: the auth cache's TTL
    for c in replicas:
        resp = await c.get("/v1/agents", headers=auth)
        assert resp.status_code == 401 and resp.json()["error"]["code"] == "invalid_api_key"
    listing = await asyncio.to_thread(run_cli, ["keys", "list", "--tenant", "team"], capsys)
    assert listing.strip().splitlines()[1].split("\t")[5] != "-"
    # An unknown id is an error exit, not a silent success.
    assert await asyncio.to_thread(cli.main, ["keys", "revoke", "key_nope"]) == 1


async def test_a_key_limited_to_models_sees_only_them(
    replicas: list[httpx.AsyncClient], capsys: pytest.CaptureFixture[str]
) -> None:
    out = await asyncio.to_thread(
        run_cli, ["keys", "create", "--tenant", "team", "--models", "poet"], capsys
    )
    c = replicas[0]
    c.headers["Authorization"] = f"Bearer {out.strip()}"
    models = [m["id"] for m in (await c.get("/v1/models")).json()["data"]]
    assert models == ["poet"]
    assert (await c.get("/v1/models/echo")).status_code == 404
    resp = await c.post("/v1/chat/completions", json=chat("echo"))
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    assert (await c.post("/v1/chat/completions", json=chat("poet"))).status_code == 200
    resp = await c.post(
        "/v1/agents", json={"name": "x", "spec": {"kind": "agent", "model": "echo"}}
    )
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.model"
    await make_agent(c, "versed", model="poet")


async def test_raw_calls_are_charged_and_budgeted(
    replicas: list[httpx.AsyncClient], capsys: pytest.CaptureFixture[str]
) -> None:
    out = await asyncio.to_thread(
        run_cli, ["keys", "create", "--tenant", "team", "--token-budget", "12"], capsys
    )
    c = replicas[0]
    c.headers["Authorization"] = f"Bearer {out.strip()}"
    app_state = c._transport.app.state.agentstation  # type: ignore[attr-defined]

    async def used() -> int:
        async with app_state.sessionmaker() as db:
            return (await tenant_budget(db, "team"))[1]

    whole = (await c.post("/v1/chat/completions", json=chat("poet"))).json()
    assert await used() == whole["usage"]["total_tokens"] > 0
    before = await used()
    streamed = await c.post("/v1/chat/completions", json=chat("poet", stream=True))
    chunks = [json.loads(line[6:]) for line in streamed.text.splitlines()
              if line.startswith("data: {")]  # fmt: skip
    assert all("usage" not in ch for ch in chunks)  # not asked for: not sent
    assert await used() > before  # but charged
    for _ in range(10):
        resp = await c.post("/v1/chat/completions", json=chat("poet"))
        if resp.status_code == 429:
            break
    assert resp.status_code == 429 and resp.json()["error"]["code"] == "budget_exceeded"
