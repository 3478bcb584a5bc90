"""``kind: user_proxy``: Byzer-Agent's UserProxyAgent with human_input_mode mapped onto
approvals. A run that must ask the person waits (``requires_action`` with a ``human_input``
call); ``POST /v1/runs/{id}/resume`` answers it (edit ``{"reply": text}``, deny = exit)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.app.conftest import make_agent, make_session, parse_sse


async def _proxy(client: httpx.AsyncClient, mode: str, **extra: Any) -> str:
    await make_agent(client, "poet-agent", model="poet")
    spec = {"kind": "user_proxy", "agent": "poet-agent", "human_input_mode": mode, **extra}
    resp = await client.post("/v1/agents", json={"name": "chat", "spec": spec})
    assert resp.status_code == 201, resp.text
    return await make_session(client, "chat")


async def test_always_waits_for_the_person_and_resumes_over_rest(
    client: httpx.AsyncClient,
) -> None:
    sid = await _proxy(client, "ALWAYS")
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "A poem, please"})
    run = resp.json()["run"]
    assert run["status"] == "requires_action", resp.text
    (call,) = run["required_action"]["tool_calls"]
    assert call["name"] == "human_input" and call["arguments"]["peer"] == "assistant"
    assert "Roses are red." in call["arguments"]["prompt"]
    assert resp.json()["message"]["content"] == "Roses are red."

    url = f"/v1/runs/{run['id']}/resume"
    more = {"decisions": [{"id": call["id"], "action": "edit", "arguments": {"reply": "More!"}}]}
    resp = await client.post(url, json={**more, "stream": True})
    events = parse_sse(resp.text)
    messages = [e["data"]["message"] for e in events if e.get("event") == "message"]
    assert [(m["sender"], m["receiver"], m["content"]) for m in messages] == [
        ("user", "assistant", "More!"),
        ("assistant", "user", "Violets are blue."),
    ]
    assert events[-1]["event"] == "run.requires_action"  # asked again
    (call,) = events[-1]["data"]["tool_calls"]

    bye = {"decisions": [{"id": call["id"], "action": "deny"}]}  # deny: the person exits
    resp = await client.post(url, json={**bye, "stream": True})
    assert parse_sse(resp.text)[-1]["event"] == "run.completed"
    # The assistant's memory is the session's: both exchanges.
    state = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert [m["content"] for m in state["assistant.memory"]] == [
        "A poem, please", "Roses are red.", "More!", "Violets are blue.",
    ]  # fmt: skip


async def test_never_answers_without_waiting(client: httpx.AsyncClient) -> None:
    sid = await _proxy(client, "NEVER", max_consecutive_auto_reply=0)
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "Hello"})
    body = resp.json()
    assert body["run"]["status"] == "completed", resp.text
    assert body["message"]["content"] == "Roses are red."


async def test_user_proxy_spec_is_checked(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/v1/agents",
        json={"name": "p", "spec": {"kind": "user_proxy", "human_input_mode": "NEVER"}},
    )
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.agent"
    resp = await client.post(
        "/v1/agents", json={"name": "q", "spec": {"model": "echo", "human_input_mode": "NEVER"}}
    )
    assert resp.status_code == 422 and resp.json()["error"]["code"] == "not_supported"
