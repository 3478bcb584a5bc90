"""Stored agents through the Responses API (SQLite and PostgreSQL): their tool calls as
``mcp_call`` items, an MCP server's tools as an ``mcp_list_tools`` item. A call waiting for
approval (``mcp_approval_request``) and its answer: test_responses_approval_continuation.py."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.agents.mcp_server import serve_http
from tests.app.approval_helpers import CALC, CALCULATOR_AGENT
from tests.app.conftest import MODELS
from tests.app.test_responses import valid, valid_events
from tests.lifespan import LifespanManager

MCP_CALLER = {
    "name": "mcpcaller",
    "backend": "scripted",
    "replies": [
        '```json\n{"name": "mcp.add", "parameters": {"a": 40, "b": 2}}\n```\n',
        "40 plus 2 is 42.",
    ],
    "cycle": "conversation",
}


@pytest.fixture(scope="module")
def mcp_url() -> Iterator[str]:
    with serve_http() as url:
        yield url


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    models = json.dumps([*MODELS, CALC, MCP_CALLER])
    application = create_app(settings_factory(models=models, outbound_allow="127.0.0.1"))
    async with LifespanManager(application):
        yield application


async def _agent(client: httpx.AsyncClient, name: str, **extra: Any) -> None:
    spec = {**CALCULATOR_AGENT, **extra}
    resp = await client.post("/v1/agents", json={"name": name, "spec": spec})
    assert resp.status_code == 201, resp.text


async def test_an_agents_tool_call_is_an_mcp_call_item(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    await _agent(client, "calc")
    response = await oai.responses.create(model="calc", input="6 times 7?")
    valid(response.model_dump(mode="json"))
    call, answer = response.output
    assert call.type == "mcp_call" and call.name == "Calculator"
    assert json.loads(call.arguments) == {"expression": "6 * 7"}
    assert call.output == "42" and call.error is None and call.status == "completed"
    assert answer.type == "message" and response.output_text == "The answer is 42."


async def test_an_mcp_server_is_listed_before_its_first_call(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient, mcp_url: str
) -> None:
    """An agent with an MCP server: OpenAI's ``mcp_list_tools`` item (the server's tools,
    with their schemas) comes before the server's first ``mcp_call``, in the answer, the
    stream (with its ``response.mcp_list_tools.*`` events) and the stored response."""
    tools = [{"name": "mcp", "config": {"url": mcp_url, "allow": ["add", "shout"]}}]
    spec = {"kind": "tool_agent", "model": "mcpcaller", "tools": tools}
    made = await client.post("/v1/agents", json={"name": "mcpuser", "spec": spec})
    assert made.status_code == 201, made.text
    raw = await client.post(
        "/v1/responses", json={"model": "mcpuser", "input": "40 + 2?", "stream": True}
    )
    events = valid_events(raw.text)
    done = valid(events[-1]["response"])
    listed, call, answer = done.output
    assert listed.type == "mcp_list_tools" and listed.server_label == "mcp"
    assert sorted(t.name for t in listed.tools) == ["add", "shout"]
    add = next(t for t in listed.tools if t.name == "add")
    assert add.description == "Add two integers."
    assert set(add.input_schema["properties"]) == {"a", "b"}  # type: ignore[index]
    assert listed.error is None
    assert call.type == "mcp_call" and call.server_label == "mcp" and call.name == "add"
    assert call.output == "42"
    assert answer.type == "message" and done.output_text == "40 plus 2 is 42."
    types = [e["type"] for e in events]
    at = types.index("response.mcp_list_tools.in_progress")
    assert types[at - 1 : at + 3] == [
        "response.output_item.added",
        "response.mcp_list_tools.in_progress",
        "response.mcp_list_tools.completed",
        "response.output_item.done",
    ]
    assert [i["id"] for i in done.model_dump()["output"]] == [
        i["id"] for i in (await oai.responses.retrieve(done.id)).model_dump()["output"]
    ]
    # The calculator agent (no MCP server) lists nothing.
    await _agent(client, "calc")
    plain = await oai.responses.create(model="calc", input="6 times 7?")
    assert [i.type for i in plain.output] == ["mcp_call", "message"]
