"""/v1/agents/{name}/versions and /rollback: history newest first, paged; rollback is a new
version; unknown versions are 404; tenants isolated (SQLite and PostgreSQL)."""

from __future__ import annotations

import httpx

from tests.app.conftest import make_agent, make_session


async def _put(client: httpx.AsyncClient, name: str, prompt: str) -> None:
    spec = {"kind": "agent", "model": "echo", "system_prompt": prompt}
    resp = await client.put(f"/v1/agents/{name}", json={"spec": spec})
    assert resp.status_code == 200, resp.text


async def test_versions_newest_first_paged_and_one_by_number(client: httpx.AsyncClient) -> None:
    await make_agent(client, "poet", system_prompt="v1")
    await _put(client, "poet", "v2")
    await _put(client, "poet", "v3")
    page = (await client.get("/v1/agents/poet/versions", params={"limit": 2})).json()
    assert [(v["version"], v["spec"]["system_prompt"]) for v in page["data"]] == [
        (3, "v3"),
        (2, "v2"),
    ]
    assert page["has_more"] is True
    assert [v["current"] for v in page["data"]] == [True, False]
    assert page["data"][0]["agent"] == "poet"
    rest = await client.get("/v1/agents/poet/versions", params={"limit": 2, "after": "2"})
    assert [v["version"] for v in rest.json()["data"]] == [1] and not rest.json()["has_more"]
    one = await client.get("/v1/agents/poet/versions/1")
    assert one.status_code == 200 and one.json()["spec"]["system_prompt"] == "v1"
    bad_cursor = await client.get("/v1/agents/poet/versions", params={"after": "9"})
    assert bad_cursor.status_code == 400
    assert bad_cursor.json()["error"]["code"] == "invalid_cursor"


async def test_unknown_version_or_agent_is_404(client: httpx.AsyncClient) -> None:
    await make_agent(client, "poet")
    for path in (
        "/v1/agents/poet/versions/2",
        "/v1/agents/poet/versions/x",
        "/v1/agents/nobody/versions",
        "/v1/agents/poet/versions/0",
    ):
        resp = await client.get(path)
        assert resp.status_code == 404, path
        assert resp.json()["error"]["code"] == "not_found"
    resp = await client.post("/v1/agents/poet/rollback", json={"version": 7})
    assert resp.status_code == 404 and resp.json()["error"]["param"] == "version"
    resp = await client.post("/v1/agents/poet/rollback", json={"version": "1"})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "version"
    assert (await client.get("/v1/agents/poet")).json()["version"] == 1


async def test_rollback_makes_a_new_version_and_keeps_history(client: httpx.AsyncClient) -> None:
    await make_agent(client, "poet", system_prompt="v1")
    await _put(client, "poet", "v2")
    old_session = await make_session(client, "poet")
    resp = await client.post("/v1/agents/poet/rollback", json={"version": 1})
    assert resp.status_code == 200, resp.text
    assert resp.json()["version"] == 3 and resp.json()["spec"]["system_prompt"] == "v1"
    assert (await client.get("/v1/agents/poet")).json()["spec"]["system_prompt"] == "v1"
    history = (await client.get("/v1/agents/poet/versions")).json()["data"]
    assert [(v["version"], v["spec"]["system_prompt"]) for v in history] == [
        (3, "v1"),
        (2, "v2"),
        (1, "v1"),
    ]
    # Sessions keep the version they started on; new ones take the rolled-back spec.
    assert (await client.get(f"/v1/sessions/{old_session}")).json()["agent_version"] == 2
    new_session = await make_session(client, "poet")
    assert (await client.get(f"/v1/sessions/{new_session}")).json()["agent_version"] == 3


async def test_rollback_validates_the_old_spec_again(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper2")
    await make_agent(client, "boss", sub_agents={"h": "helper2"})
    resp = await client.put("/v1/agents/boss", json={"spec": {"model": "echo"}})
    assert resp.status_code == 200
    assert (await client.delete("/v1/agents/helper2")).status_code == 204
    # Version 1 names an agent that is gone: rolling back to it is refused like a PUT of it.
    resp = await client.post("/v1/agents/boss/rollback", json={"version": 1})
    assert resp.status_code == 422, resp.text
    assert (await client.get("/v1/agents/boss")).json()["version"] == 2


async def test_versions_are_per_tenant(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient
) -> None:
    await make_agent(client, "mine")
    assert (await client_b.get("/v1/agents/mine/versions")).status_code == 404
    assert (await client_b.get("/v1/agents/mine/versions/1")).status_code == 404
    resp = await client_b.post("/v1/agents/mine/rollback", json={"version": 1})
    assert resp.status_code == 404


async def test_openapi_documents_versions(client: httpx.AsyncClient) -> None:
    paths = (await client.get("/openapi.json")).json()["paths"]
    listing = paths["/v1/agents/{name}/versions"]["get"]
    assert "400" in listing["responses"] and "404" in listing["responses"]
    one = paths["/v1/agents/{name}/versions/{version}"]["get"]
    assert {p["name"]: p["schema"]["pattern"] for p in one["parameters"]}["version"]
    rollback = paths["/v1/agents/{name}/rollback"]["post"]
    assert rollback["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith(
        "AgentRollback"
    )
    assert "404" in rollback["responses"] and "422" in rollback["responses"]
