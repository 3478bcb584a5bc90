"""MCP servers as tool sources in agent specs, over REST: a scripted tool agent calls two tools
of a server written with the official SDK; the URL policy applies to MCP URLs too."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest

from app.main import create_app
from tests.agents.mcp_server import serve_http
from tests.app.conftest import KEY_A, MODELS, make_settings
from tests.lifespan import LifespanManager

CALLS = [
    '```json\n{"name": "mcp.add", "parameters": {"a": 40, "b": 2}}\n```\n',
    '```json\n{"name": "mcp.shout", "parameters": {"text": "answer"}}\n```\n',
    "42 is the ANSWER.",
]


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serve_http() as url:
        yield url


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    models = [*MODELS, {"name": "caller", "backend": "scripted", "replies": CALLS}]
    app = create_app(
        make_settings(database_url, models=json.dumps(models), outbound_allow="127.0.0.1")
    )
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as c:
            yield c


async def test_a_tool_agent_uses_an_mcp_server(client: httpx.AsyncClient, mcp_url: str) -> None:
    tools = [{"name": "mcp", "config": {"url": mcp_url, "allow": ["add", "shout"]}}]
    spec = {"kind": "tool_agent", "model": "caller", "tools": tools}
    resp = await client.post("/v1/agents", json={"name": "mcpuser", "spec": spec})
    assert resp.status_code == 201, resp.text
    sid = (await client.post("/v1/sessions", json={"agent": "mcpuser"})).json()["id"]
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "go"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["message"]["content"] == "42 is the ANSWER."
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    results = [m["formatted"]["result"] for m in memory if m["sender"] == "AsyncActionExecutor"]
    assert results == [[{"type": "text", "content": "42"}], [{"type": "text", "content": "ANSWER"}]]
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204


async def test_mcp_urls_follow_the_outbound_policy(client: httpx.AsyncClient) -> None:
    tools = [{"name": "mcp", "config": {"url": "http://169.254.169.254/mcp"}}]
    spec = {"kind": "tool_agent", "model": "caller", "tools": tools}
    resp = await client.post("/v1/agents", json={"name": "bad", "spec": spec})
    assert resp.status_code == 422
    error = resp.json()["error"]
    assert error["code"] == "url_not_allowed" and error["param"] == "spec.tools[0].config.url"
    tools = [{"name": "mcp", "config": {"url": "http://x/mcp", "command": ["srv"]}}]
    spec = {"kind": "tool_agent", "model": "caller", "tools": tools}
    resp = await client.post("/v1/agents", json={"name": "bad", "spec": spec})
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "invalid_tool_config"
