"""One way a session is made (``services/sessions.py: create_session``, the run store's
statement) for POST /v1/sessions, a conversation and an A2A context: its errors, named as
before, and a conversation's first items stored with its session, all or nothing (SQLite and
PostgreSQL)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from a2a.utils.errors import InvalidParamsError
from fastapi import FastAPI

from app.a2a.handler import A2ACall, RunsRequestHandler
from app.db.base import new_id, utcnow
from app.errors import AppError
from app.main import create_app
from app.runtime.store import NewSession
from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent, make_session
from tests.app.test_turn_cost import counting, engine_of, settle
from tests.lifespan import LifespanManager

ITEM = {"key": "memory", "index": 0, "data": {"sender": "user", "content": "first"}}


def _new(tenant: str, session_id: str, agent: str, memory: list[dict[str, Any]]) -> NewSession:
    return NewSession(new_id("sesspk"), tenant, session_id, agent, {}, utcnow(), memory)


async def _memory(client: httpx.AsyncClient, session_id: str) -> list[dict[str, Any]]:
    resp = await client.get(f"/v1/sessions/{session_id}/memory")
    assert resp.status_code == 200, resp.text
    items: list[dict[str, Any]] = resp.json()["memory"]
    return items


async def test_a_session_and_its_first_memory_are_stored_together(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client)
    store = app.state.agentstation.run_manager.store
    await store.create_session(_new("a", "with_memory", "helper", [ITEM]))
    assert [m["content"] for m in await _memory(client, "with_memory")] == ["first"]
    # A memory that cannot be stored (two entries at one index) leaves no session behind.
    with pytest.raises(Exception, match=r"(?i)unique"):
        await store.create_session(_new("a", "half_made", "helper", [ITEM, ITEM]))
    assert (await client.get("/v1/sessions/half_made")).status_code == 404


async def test_an_existing_id_is_refused_and_its_memory_left_alone(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    store = app.state.agentstation.run_manager.store
    with pytest.raises(AppError) as exists:
        await store.create_session(_new("a", sid, "helper", [ITEM]))
    assert (exists.value.status, exists.value.code, exists.value.param) == (
        409,
        "session_exists",
        "id",
    )
    assert await _memory(client, sid) == []
    with pytest.raises(AppError) as unknown:
        await store.create_session(_new("a", "other", "ghost", [ITEM]))
    assert (unknown.value.status, unknown.value.code, unknown.value.param) == (
        422,
        "unknown_agent",
        "agent",
    )
    assert (await client.get("/v1/sessions/other")).status_code == 404
    # POST /v1/sessions answers the same errors.
    again = await client.post("/v1/sessions", json={"agent": "helper", "id": sid})
    assert again.status_code == 409 and again.json()["error"]["code"] == "session_exists"
    ghost = await client.post("/v1/sessions", json={"agent": "ghost"})
    error = ghost.json()["error"]
    assert ghost.status_code == 422
    assert (error["code"], error["param"]) == ("unknown_agent", "agent")


async def test_an_a2a_context_is_made_once_and_names_its_errors(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client)
    await make_agent(client, "other")
    state = app.state.agentstation
    handler = RunsRequestHandler()
    assert await handler._session(A2ACall(state, "a", "helper"), "ctx_1") == "ctx_1"
    session = (await client.get("/v1/sessions/ctx_1")).json()
    assert session["agent"] == "helper"
    assert await handler._session(A2ACall(state, "a", "helper"), "ctx_1") == "ctx_1"  # found
    with pytest.raises(InvalidParamsError, match="belongs to another agent"):
        await handler._session(A2ACall(state, "a", "other"), "ctx_1")
    with pytest.raises(AppError) as unknown:
        await handler._session(A2ACall(state, "a", "ghost"), "ctx_2")
    assert (unknown.value.code, unknown.value.param) == ("unknown_agent", "agent")


@pytest.fixture
async def quiet_app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    """An app whose batched tenant usage is not flushed while a test counts statements."""
    application = create_app(settings_factory(usage_flush_s=3600))
    async with LifespanManager(application):
        yield application


async def test_a_conversations_first_response_needs_no_session_lookup(quiet_app: FastAPI) -> None:
    # As a session made by POST /v1/sessions, a conversation's session is kept for its first
    # turn (its tenant known to have no budget): that turn does not look the session up, and
    # sees the first item stored with it (at memory revision 1).
    transport = httpx.ASGITransport(app=quiet_app)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        warm = await c.post("/v1/responses", json={"model": "echo", "input": "warm up"})
        assert warm.status_code == 200, warm.text  # the tenant is known unlimited now
        items = [{"type": "message", "role": "user", "content": "My name is Ada."}]
        made = await c.post("/v1/conversations", json={"items": items, "metadata": {"k": "v"}})
        assert made.status_code == 200, made.text
        conversation = made.json()
        assert conversation["object"] == "conversation" and conversation["metadata"] == {"k": "v"}
        assert made.headers["X-Session-Id"] == conversation["id"]
        await settle(quiet_app)
        body = {"model": "echo", "input": "hello", "conversation": conversation["id"]}
        with counting(engine_of(quiet_app)) as counter:
            answer = await c.post("/v1/responses", json=body)
            await settle(quiet_app)
        assert answer.status_code == 200, answer.text
        lookups = [s for s in counter.statements if "FROM sessions" in s and "JOIN agents" in s]
        assert lookups == [], counter.statements
        listed = (await c.get(f"/v1/conversations/{conversation['id']}/items?order=asc")).json()
        texts = [i["content"][0]["text"] for i in listed["data"]]
        assert texts == ["My name is Ada.", "hello", "hello"]
