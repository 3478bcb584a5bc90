"""``output_format: {"type": "native"}`` through the gateway: validated, built, run."""

from __future__ import annotations

import httpx

from agents.native import NativeToolFormat
from app.runtime.builders import _output_format
from app.schemas.agents import AgentSpec
from tests.app.conftest import parse_sse

SPEC = {
    "kind": "tool_agent",
    "model": "echo",
    "tools": [{"name": "Calculator"}],
    "output_format": {"type": "native", "tool_choice": "auto"},
}


def test_the_spec_builds_a_native_format_with_its_tool_choice() -> None:
    fmt = _output_format(AgentSpec.model_validate(SPEC))
    assert isinstance(fmt, NativeToolFormat) and fmt.tool_choice == "auto"


async def test_a_native_tool_agent_is_accepted_and_answers(client: httpx.AsyncClient) -> None:
    bad = {**SPEC, "output_format": {"type": "native", "tool_choice": "sometimes"}}
    resp = await client.post("/v1/agents", json={"name": "bad", "spec": bad})
    assert resp.status_code == 422
    resp = await client.post("/v1/agents", json={"name": "nat", "spec": SPEC})
    assert resp.status_code == 201, resp.text
    assert resp.json()["spec"]["output_format"]["type"] == "native"
    sid = (await client.post("/v1/sessions", json={"agent": "nat"})).json()["id"]
    resp = await client.post(
        f"/v1/sessions/{sid}/messages", json={"message": "no tools needed", "stream": True}
    )
    events = [f for f in parse_sse(resp.text) if "event" in f]
    assert events[-1]["event"] == "run.completed"
    assert events[-1]["data"]["run"]["output"]["content"] == "no tools needed"
