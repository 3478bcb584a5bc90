"""/v1/agents: CRUD, versions, spec validation, tenants, auth."""

from __future__ import annotations

import httpx
import pytest

from tests.app.conftest import make_agent


async def test_create_get_list_update_delete(client: httpx.AsyncClient) -> None:
    created = await make_agent(client, "writer", system_prompt="Be brief.")
    assert created["version"] == 1
    assert created["spec"]["model"] == "echo"
    assert created["id"].startswith("agent_")
    got = await client.get("/v1/agents/writer")
    assert got.status_code == 200 and got.json() == created
    upd = await client.put(
        "/v1/agents/writer", json={"description": "v2", "spec": {"model": "poet"}}
    )
    assert upd.status_code == 200, upd.text
    assert upd.json()["version"] == 2
    assert upd.json()["description"] == "v2"
    assert upd.json()["spec"]["model"] == "poet"
    listed = (await client.get("/v1/agents")).json()
    assert [a["name"] for a in listed["data"]] == ["writer"] and listed["has_more"] is False
    assert (await client.delete("/v1/agents/writer")).status_code == 204
    gone = await client.get("/v1/agents/writer")
    assert gone.status_code == 404
    assert gone.json()["error"]["code"] == "not_found"


async def test_list_is_newest_first_and_pages(client: httpx.AsyncClient) -> None:
    for name in ("a1", "a2", "a3"):
        await make_agent(client, name)
    first = (await client.get("/v1/agents", params={"limit": 2})).json()
    assert [a["name"] for a in first["data"]] == ["a3", "a2"] and first["has_more"]
    second = (await client.get("/v1/agents", params={"limit": 2, "after": "a2"})).json()
    assert [a["name"] for a in second["data"]] == ["a1"] and not second["has_more"]
    bad = await client.get("/v1/agents", params={"limit": 0})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "limit"


async def test_duplicate_name_is_409(client: httpx.AsyncClient) -> None:
    await make_agent(client, "dup")
    resp = await client.post("/v1/agents", json={"name": "dup", "spec": {"model": "echo"}})
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "agent_exists"


@pytest.mark.parametrize(
    ("spec", "param", "code"),
    [
        ({"model": "nope"}, "spec.model", "unknown_model"),
        ({"model": "echo", "kind": "wizard"}, "spec.kind", "unknown_kind"),
        (
            {
                "model": "echo",
                "kind": "tool_agent",
                "tools": [{"name": "Calculator"}, {"name": "Nope"}],
            },
            "spec.tools[1].name",
            "unknown_tool",
        ),
        ({"model": "echo", "tools": [{"name": "Calculator"}]}, "spec.tools", "tools_not_supported"),
        (
            {
                "model": "echo",
                "kind": "tool_agent",
                "tools": [{"name": "IPythonInteractive", "config": {"no_such_option": 1}}],
            },
            "spec.tools[0].config",
            "invalid_tool_config",
        ),
        (
            {"model": "echo", "gen_params": {"temperature": 9}},
            "spec.gen_params.temperature",
            "invalid_value",
        ),
        ({"model": "echo", "gen_params": {"bogus": 1}}, "spec.gen_params.bogus", "invalid_value"),
        ({"model": "echo", "max_turn": 0}, "spec.max_turn", "invalid_value"),
        (
            {"model": "echo", "sub_agents": {"w": {"model": "zzz"}}},
            "spec.sub_agents.w.model",
            "unknown_model",
        ),
        ({}, "spec.model", "missing_field"),
    ],
)
async def test_bad_spec_is_422_naming_the_field(
    client: httpx.AsyncClient, spec: dict[str, object], param: str, code: str
) -> None:
    resp = await client.post("/v1/agents", json={"name": "bad", "spec": spec})
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["param"] == param
    assert error["code"] == code
    assert error["type"] == "invalid_request_error"


async def test_bad_name_and_missing_spec(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/agents", json={"name": "has space", "spec": {"model": "echo"}})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "name"
    resp = await client.post("/v1/agents", json={"name": "x"})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec"
    assert resp.json()["error"]["code"] == "missing_field"


async def test_update_validates_and_unknown_is_404(client: httpx.AsyncClient) -> None:
    await make_agent(client, "v")
    resp = await client.put("/v1/agents/v", json={"spec": {"model": "nope"}})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.model"
    assert (await client.get("/v1/agents/v")).json()["version"] == 1
    assert (await client.put("/v1/agents/zz", json={"spec": {"model": "echo"}})).status_code == 404
    assert (await client.delete("/v1/agents/zz")).status_code == 404


async def test_tool_agent_with_registered_tools(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/v1/agents",
        json={
            "name": "calc",
            "spec": {
                "kind": "tool_agent",
                "model": "echo",
                "tools": [
                    {"name": "Calculator"},
                    {"name": "IPythonInteractive", "config": {"timeout_s": 5}},
                ],
            },
        },
    )
    assert resp.status_code == 201, resp.text


async def test_tenants_are_isolated(client: httpx.AsyncClient, client_b: httpx.AsyncClient) -> None:
    await make_agent(client, "mine")
    assert (await client_b.get("/v1/agents/mine")).status_code == 404
    assert (await client_b.get("/v1/agents")).json()["data"] == []
    # The same name is free in another tenant.
    await make_agent(client_b, "mine")


async def test_auth_is_required(client: httpx.AsyncClient) -> None:
    no_key = await client.get("/v1/agents", headers={"Authorization": ""})
    assert no_key.status_code == 401
    assert no_key.json()["error"]["type"] == "authentication_error"
    wrong = await client.get("/v1/agents", headers={"Authorization": "Bearer nope"})
    assert wrong.status_code == 401 and wrong.json()["error"]["code"] == "invalid_api_key"
    basic = await client.get("/v1/agents", headers={"Authorization": "Basic abc"})
    assert basic.status_code == 401


async def test_nul_in_text_is_a_4xx_not_a_500(client: httpx.AsyncClient) -> None:
    # PostgreSQL's text and jsonb cannot hold U+0000 (found by the fuzz test); SQLite can.
    resp = await client.post(
        "/v1/agents", json={"name": "nul", "description": "a\u0000b", "spec": {"model": "echo"}}
    )
    if resp.status_code == 201:
        assert resp.json()["description"] == "a\u0000b"  # stored whole (SQLite)
    else:
        assert resp.status_code == 400, resp.text
        assert resp.json()["error"]["code"] == "invalid_value"
        assert "NUL" in resp.json()["error"]["message"]
        assert (await client.get("/v1/agents/nul")).status_code == 404  # nothing half-written
    assert (await client.get("/v1/agents")).status_code == 200  # and the service goes on
