"""/v1/sessions: CRUD, memory (state_dict) get/put/reset, tenants."""

from __future__ import annotations

import httpx

from tests.app.conftest import make_agent, make_session


async def test_create_get_list_delete(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper")
    await make_agent(client, "other")
    resp = await client.post(
        "/v1/sessions", json={"agent": "helper", "id": "s-1", "metadata": {"u": 1}}
    )
    assert resp.status_code == 201, resp.text
    session = resp.json()
    assert session["id"] == "s-1" and session["agent"] == "helper"
    assert session["agent_version"] == 1 and session["metadata"] == {"u": 1}
    generated = await make_session(client)
    assert generated.startswith("sess_")
    await make_session(client, "other")
    assert (await client.get("/v1/sessions/s-1")).json() == session
    all_ids = [s["id"] for s in (await client.get("/v1/sessions")).json()["data"]]
    assert all_ids[1:] == [generated, "s-1"]
    mine = (await client.get("/v1/sessions", params={"agent": "helper"})).json()["data"]
    assert [s["id"] for s in mine] == [generated, "s-1"]
    page = (await client.get("/v1/sessions", params={"limit": 1, "after": generated})).json()
    assert [s["id"] for s in page["data"]] == ["s-1"] and page["has_more"] is False
    assert (await client.delete("/v1/sessions/s-1")).status_code == 204
    assert (await client.get("/v1/sessions/s-1")).status_code == 404
    assert (await client.delete("/v1/sessions/s-1")).status_code == 404


async def test_create_errors(client: httpx.AsyncClient) -> None:
    resp = await client.post("/v1/sessions", json={"agent": "ghost"})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "agent"
    await make_agent(client)
    await make_session(client, id="twice")
    resp = await client.post("/v1/sessions", json={"agent": "helper", "id": "twice"})
    assert resp.status_code == 409 and resp.json()["error"]["code"] == "session_exists"
    resp = await client.post("/v1/sessions", json={"agent": "helper", "metadata": [1]})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "metadata"


async def test_session_pins_agent_version(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper", model="poet")
    sid = await make_session(client)
    await client.put("/v1/agents/helper", json={"spec": {"model": "echo"}})
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hello"})
    assert resp.json()["message"]["content"] == "Roses are red."  # still version 1
    newer = await make_session(client)
    assert (await client.get(f"/v1/sessions/{newer}")).json()["agent_version"] == 2
    resp = await client.post(f"/v1/sessions/{newer}/messages", json={"message": "hello"})
    assert resp.json()["message"]["content"] == "hello"


async def test_memory_get_put_reset(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    assert (await client.get(f"/v1/sessions/{sid}/memory")).json() == {"memory": []}
    state = {
        "memory": [
            {"content": "my name is Ada", "sender": "user"},
            {"content": "Hello Ada", "sender": "helper"},
        ]
    }
    put = await client.put(f"/v1/sessions/{sid}/memory", json=state)
    assert put.status_code == 200, put.text
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [(m["sender"], m["content"]) for m in memory] == [
        ("user", "my name is Ada"),
        ("helper", "Hello Ada"),
    ]
    assert memory[0]["stream_state"] == 0
    # The next turn sees the imported memory and appends to it.
    await client.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["my name is Ada", "Hello Ada", "again", "again"]
    reset = await client.post(f"/v1/sessions/{sid}/reset")
    assert reset.status_code == 200 and reset.json()["id"] == sid
    assert (await client.get(f"/v1/sessions/{sid}/memory")).json() == {"memory": []}


async def test_memory_put_rejects_bad_messages(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    bad = await client.put(f"/v1/sessions/{sid}/memory", json={"memory": [{"sender": "user"}]})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "memory"
    bad = await client.put(f"/v1/sessions/{sid}/memory", json={"memory": "text"})
    assert bad.status_code == 422
    bad = await client.put(f"/v1/sessions/{sid}/memory", json=[1, 2])
    assert bad.status_code == 400
    bad = await client.put(
        f"/v1/sessions/{sid}/memory", json={"writer.memory": [{"content": "x", "sender": "user"}]}
    )
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "writer.memory"
    assert bad.json()["error"]["code"] == "unknown_memory_key"


async def test_patch_metadata(client: httpx.AsyncClient) -> None:
    """A session is renamed by its metadata (the playground's title): merged, null removes."""
    await make_agent(client)
    resp = await client.post(
        "/v1/sessions", json={"agent": "helper", "id": "p-1", "metadata": {"user": "ada"}}
    )
    created = resp.json()
    resp = await client.patch("/v1/sessions/p-1", json={"metadata": {"title": "Primes"}})
    assert resp.status_code == 200, resp.text
    assert resp.json()["metadata"] == {"user": "ada", "title": "Primes"}
    assert resp.json()["updated_at"] >= created["updated_at"]
    got = (await client.get("/v1/sessions/p-1")).json()
    assert got["metadata"] == {"user": "ada", "title": "Primes"}
    listed = (await client.get("/v1/sessions")).json()["data"][0]
    assert listed["metadata"]["title"] == "Primes"
    resp = await client.patch("/v1/sessions/p-1", json={"metadata": {"user": None, "n": 2}})
    assert resp.json()["metadata"] == {"title": "Primes", "n": 2}
    for body, param in [
        ({}, "metadata"),
        ({"metadata": "x"}, "metadata"),
        ({"metadata": {}, "agent": "other"}, "agent"),
    ]:
        bad = await client.patch("/v1/sessions/p-1", json=body)
        assert bad.status_code == 422, (body, bad.text)
        assert bad.json()["error"]["param"] == param, bad.json()
    missing = await client.patch("/v1/sessions/nope", json={"metadata": {}})
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"


async def test_other_tenant_sees_404(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    for method, path in [
        ("GET", f"/v1/sessions/{sid}"),
        ("DELETE", f"/v1/sessions/{sid}"),
        ("GET", f"/v1/sessions/{sid}/memory"),
        ("POST", f"/v1/sessions/{sid}/reset"),
        ("GET", f"/v1/sessions/{sid}/runs"),
    ]:
        resp = await client_b.request(method, path)
        assert resp.status_code == 404, (method, path)
    resp = await client_b.post(f"/v1/sessions/{sid}/messages", json={"message": "x"})
    assert resp.status_code == 404
    resp = await client_b.put(f"/v1/sessions/{sid}/memory", json={"memory": []})
    assert resp.status_code == 404
    resp = await client_b.patch(f"/v1/sessions/{sid}", json={"metadata": {"title": "mine"}})
    assert resp.status_code == 404
    assert (await client.get(f"/v1/sessions/{sid}")).json()["metadata"] == {}
    assert (await client_b.get("/v1/sessions")).json()["data"] == []


async def test_memory_entries_are_checked_as_the_document_describes_them(
    client: httpx.AsyncClient,
) -> None:
    """Found by the contract fuzzer: ``stream_state: false`` was stored as 0 (JSON false is
    not an integer), and a non-string ``sender`` is refused too (MemoryEntry)."""
    await make_agent(client)
    sid = await make_session(client)
    for entry in ({"content": "x", "stream_state": False}, {"content": "x", "sender": 1}):
        resp = await client.put(f"/v1/sessions/{sid}/memory", json={"memory": [entry]})
        assert resp.status_code == 422, resp.text
        assert resp.json()["error"]["param"] == "memory"
    ok = {"content": "x", "stream_state": 0, "unknown": "ignored"}
    resp = await client.put(f"/v1/sessions/{sid}/memory", json={"memory": [ok]})
    assert resp.status_code == 200, resp.text
