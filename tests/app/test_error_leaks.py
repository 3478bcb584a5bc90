"""Internals never reach clients (issue 12, defect 2): a failed run's ``error`` (REST and SSE),
a chat stream's error chunk and a 500 carry a stable code, a short message and the request id;
the exception (SQL and its parameters, other tenants' ids, paths) goes to the log only."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy.exc
from fastapi import FastAPI

from agents.schema import AgentMessage
from app.errors import INTERNAL_MESSAGE
from tests.app.conftest import make_agent, make_session, parse_sse

SQL = "INSERT INTO messages (session_pk, key, index, data) VALUES (?, ?, ?, ?)"
PARAMS = ("sesspk_of_tenant_b", "memory", 3, '{"content": "secret of tenant b"}')
SECRETS = ("INSERT", "sesspk_of_tenant_b", "secret of tenant b", "UNIQUE", "Traceback", ".py")


class _Failing:
    """An agent whose turn fails the way a run's store failed in issue 12 (SQL, params)."""

    def state_dict(self, session_id: Any = 0) -> dict[str, Any]:
        return {"memory": []}

    def load_state_dict(self, state: dict[str, Any], session_id: Any = 0) -> None:
        pass

    async def stream(
        self, message: Any, session_id: Any = 0, **kw: Any
    ) -> AsyncIterator[AgentMessage]:
        yield AgentMessage(sender="failing", content="partial", stream_state=1)
        cause = Exception("UNIQUE constraint failed: messages.session_pk, messages.key")
        raise sqlalchemy.exc.IntegrityError(SQL, PARAMS, cause)


def assert_sanitized(error: dict[str, Any], request_id: str) -> None:
    text = json.dumps(error)
    assert not [s for s in SECRETS if s in text], error
    assert error == {
        "message": INTERNAL_MESSAGE,
        "type": "server_error",
        "param": None,
        "code": "internal_error",
        "request_id": request_id,
    }


async def test_a_failed_run_tells_the_client_no_internals(
    app: FastAPI, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    app.state.agentstation.registry.add_kind("failing", lambda spec, ctx: _Failing())
    await make_agent(client, kind="failing")
    sid = await make_session(client)
    with caplog.at_level(logging.ERROR):
        resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"})
    request_id = resp.headers["x-request-id"]
    run = resp.json()["run"]
    assert run["status"] == "failed"
    assert_sanitized(run["error"], request_id)
    # The detail is in the log, under the same request id.
    logged = [
        r for r in caplog.records if r.exc_info and "sesspk_of_tenant_b" in str(r.exc_info[1])
    ]
    assert logged and getattr(logged[0], "request_id", None) == request_id
    # REST, and the SSE replay of the run's events.
    assert_sanitized((await client.get(f"/v1/runs/{run['id']}")).json()["error"], request_id)
    frames = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
    assert frames[-1]["event"] == "run.failed"
    assert_sanitized(frames[-1]["data"]["error"], request_id)
    assert_sanitized(frames[-1]["data"]["run"]["error"], request_id)

    # Streamed: the live run.failed event says the same.
    body = {"message": "y", "stream": True}
    resp = await client.post(f"/v1/sessions/{sid}/messages", json=body)
    frames = [f for f in parse_sse(resp.text) if "event" in f]
    assert frames[-1]["event"] == "run.failed"
    assert_sanitized(frames[-1]["data"]["error"], resp.headers["x-request-id"])


async def test_a_failed_chat_stream_and_a_500_tell_no_internals(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    state = app.state.agentstation
    state.registry.add_kind("failing", lambda spec, ctx: _Failing())
    await make_agent(client, "fragile", kind="failing")
    body = {"model": "fragile", "messages": [{"role": "user", "content": "x"}], "stream": True}
    resp = await client.post("/v1/chat/completions", json=body)
    chunks = [c.removeprefix("data: ") for c in resp.text.strip().split("\n\n")]
    assert chunks[-1] == "[DONE]"
    assert_sanitized(json.loads(chunks[-2])["error"], resp.headers["x-request-id"])

    # Any unexpected exception in a route: a 500 with the same envelope.
    async def broken(_db: Any, _tenant: str, _run_id: str) -> Any:
        raise sqlalchemy.exc.IntegrityError(SQL, PARAMS, Exception("UNIQUE"))

    from app.services import runs as run_service

    original = run_service.get_run
    run_service.get_run = broken  # type: ignore[assignment]
    try:
        resp = await client.get("/v1/runs/run_x")
    finally:
        run_service.get_run = original
    assert resp.status_code == 500
    assert_sanitized(resp.json()["error"], resp.headers["x-request-id"])
