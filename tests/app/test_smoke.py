"""A first turn end to end."""

from __future__ import annotations

import httpx

from tests.app.conftest import make_agent, make_session


async def test_turn_is_answered_and_remembered(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="poet")
    sid = await make_session(client)
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["run"]["status"] == "completed"
    assert body["message"]["content"] == "Roses are red."
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert [m["content"] for m in memory["memory"]] == ["hi", "Roses are red."]
