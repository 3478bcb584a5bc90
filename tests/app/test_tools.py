"""A tool agent through the gateway: the tool call and its result are messages of the run."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import KEY_A, MODELS, parse_sse
from tests.lifespan import LifespanManager

CALL = '```json\n{"name": "Calculator", "parameters": {"expression": "6*7"}}\n```\n'


@pytest.fixture
async def tool_client(
    settings_factory: Callable[..., Settings],
) -> AsyncIterator[httpx.AsyncClient]:
    models = [*MODELS, {"name": "caller", "backend": "scripted", "replies": [CALL, "It is 42."]}]
    app = create_app(settings_factory(models=json.dumps(models)))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as c:
            yield c


async def test_tool_call_and_result_are_streamed_and_stored(tool_client: httpx.AsyncClient) -> None:
    spec = {"kind": "tool_agent", "model": "caller", "tools": [{"name": "Calculator"}]}
    assert (await tool_client.post("/v1/agents", json={"name": "calc", "spec": spec})).is_success
    sid = (await tool_client.post("/v1/sessions", json={"agent": "calc"})).json()["id"]
    resp = await tool_client.post(
        f"/v1/sessions/{sid}/messages", json={"message": "what is 6*7?", "stream": True}
    )
    events = [f for f in parse_sse(resp.text) if "event" in f]
    messages = [e["data"] for e in events if e["event"] == "message"]
    assert [m["index"] for m in messages] == [0, 1, 2]
    call, result, answer = (m["message"] for m in messages)
    assert call["sender"] == "calc" and call["stream_state"] == 4  # PLUGIN_END
    assert result["stream_state"] == 5 and "42" in result["content"]  # PLUGIN_RETURN
    assert answer["content"] == "It is 42." and answer["stream_state"] == 0
    # lagent's order: the call being written (PLUGIN_START deltas), then the complete messages.
    states = []
    for e in events:
        if e["event"] in ("message.delta", "message"):
            state = e["data"].get("stream_state", e["data"].get("message", {}).get("stream_state"))
            if not states or states[-1] != state:
                states.append(state)
    assert states == [3, 4, 5, 1, 0]  # PLUGIN_START, PLUGIN_END, PLUGIN_RETURN, (text), END
    assert events[-1]["event"] == "run.completed"
    assert events[-1]["data"]["run"]["output"]["content"] == "It is 42."
    memory = (await tool_client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["sender"] for m in memory] == ["user", "calc", "AsyncActionExecutor", "calc"]
    assert memory[-1]["content"] == "It is 42."
