"""Outages are told apart: a database outage is 503 ``database_unavailable``; an unreachable
upstream model is the engine's 503; any other connection error is a plain 500."""

from __future__ import annotations

import json
import socket
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from sqlalchemy.ext.asyncio import create_async_engine

from app.errors import database_unavailable
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import KEY_A, MODELS, make_agent, make_session
from tests.lifespan import LifespanManager


def _closed_port() -> int:
    """A local port nobody listens on (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture
async def client(settings_factory: Callable[..., Settings]) -> AsyncIterator[httpx.AsyncClient]:
    """Tenant ``a`` on an app with an ``openai`` model whose upstream refuses connections."""
    upstream: dict[str, Any] = {
        "name": "remote",
        "backend": "openai",
        "base_url": f"http://127.0.0.1:{_closed_port()}/v1",
        "gen_params": {"retry": 1},
    }
    app = create_app(settings_factory(models=json.dumps([*MODELS, upstream])))

    async def refused() -> None:
        raise ConnectionRefusedError(111, "Connect call failed (a kernel, a webhook …)")

    app.add_api_route("/v1/test-refused", refused)
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as c:
            yield c


def _error(resp: httpx.Response) -> dict[str, Any]:
    error: dict[str, Any] = resp.json()["error"]
    return error


async def test_unreachable_upstream_model_is_the_engines_503(client: httpx.AsyncClient) -> None:
    await make_agent(client, name="remote-agent", model="remote")
    for model in ("remote", "remote-agent"):  # the raw model, and an agent on it
        for stream in (False, True):
            resp = await client.post(
                "/v1/chat/completions",
                json={
                    "model": model,
                    "stream": stream,
                    "messages": [{"role": "user", "content": "hi"}],
                },
            )
            if resp.status_code == 200:  # an agent's stream has begun: the error is in-stream
                lines = [ln[6:] for ln in resp.text.splitlines() if ln.startswith("data: {")]
                error = json.loads(lines[-1])["error"]
            else:
                assert resp.status_code == 503, (model, stream, resp.text)
                error = _error(resp)
            assert error["code"] == "engine_unavailable", (model, stream, error)
            assert "upstream model unreachable" in error["message"]


async def test_session_run_on_unreachable_upstream_fails_the_run_only(
    client: httpx.AsyncClient,
) -> None:
    await make_agent(client, name="remote-agent", model="remote")
    sid = await make_session(client, agent="remote-agent")
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert resp.status_code == 200, resp.text
    run = resp.json()["run"]
    assert run["status"] == "failed"
    assert "database" not in json.dumps(run["error"])
    # The session is usable afterwards (not left busy).
    again = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert again.status_code == 200, again.text


async def test_other_connection_errors_are_not_a_database_outage(
    client: httpx.AsyncClient,
) -> None:
    resp = await client.get("/v1/test-refused")
    assert resp.status_code == 500
    assert _error(resp)["code"] == "internal_error"


async def test_refused_database_connection_is_a_database_outage() -> None:
    engine = create_async_engine(f"postgresql+asyncpg://postgres@127.0.0.1:{_closed_port()}/x")
    try:
        with pytest.raises(OSError) as caught:
            async with engine.connect():
                pass
    finally:
        await engine.dispose()
    assert database_unavailable(caught.value)
    # The same errno raised outside the driver is not.
    assert not database_unavailable(ConnectionRefusedError(111, "refused"))
