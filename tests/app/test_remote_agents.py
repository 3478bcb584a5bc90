"""Remote agents and the outbound policy: a URL is checked, its host resolved, when the agent
is stored or updated (422 naming ``spec.remote``); a URL refused when a run connects (DNS
changed since) fails that run with ``outbound_refused``, not an internal error."""

from __future__ import annotations

import logging
from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI

from app.outbound import OutboundPolicy
from app.settings import Settings


@pytest.fixture
def settings_factory(settings_factory: Callable[..., Settings]) -> Callable[..., Settings]:
    """The app lists one host name that resolves nowhere (as if DNS answered then)."""
    return lambda **kw: settings_factory(**{"outbound_allow": "far.test", **kw})


async def test_a_remote_url_is_resolved_and_checked_when_stored(client: httpx.AsyncClient) -> None:
    unresolvable = {"remote": "https://nowhere.invalid/a2a/x/"}
    resp = await client.post("/v1/agents", json={"name": "far", "spec": unresolvable})
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "url_not_allowed" and error["param"] == "spec.remote"
    assert "does not resolve" in error["message"]
    # Found by the contract fuzzer: a label too long for IDNA raised UnicodeError (a 500).
    long_label = {"remote": f"http://{'a' * 64}.example/"}
    resp = await client.post("/v1/agents", json={"name": "far", "spec": long_label})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.remote"
    listed = {"remote": "http://far.test/a2a/x/"}
    assert (
        await client.post("/v1/agents", json={"name": "far", "spec": listed})
    ).status_code == 201
    # An update is checked the same way, inline agents too.
    spec = {"kind": "agent", "model": "echo", "sub_agents": {"x": unresolvable}}
    resp = await client.put("/v1/agents/far", json={"spec": spec})
    assert resp.status_code == 422
    assert resp.json()["error"]["param"] == "spec.sub_agents.x.remote"
    assert (await client.get("/v1/agents/far")).json()["version"] == 1


async def test_a_url_refused_when_the_run_connects_fails_the_run_clearly(
    app: FastAPI, client: httpx.AsyncClient, caplog: pytest.LogCaptureFixture
) -> None:
    spec = {"remote": "http://far.test/a2a/x/"}
    assert (await client.post("/v1/agents", json={"name": "far", "spec": spec})).status_code == 201
    sid = (await client.post("/v1/sessions", json={"agent": "far"})).json()["id"]
    # The policy changes (as DNS may): the host is no longer allowed when the run connects.
    app.state.agentstation.registry.outbound = OutboundPolicy()
    with caplog.at_level(logging.WARNING):
        resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert resp.status_code == 200, resp.text
    run = resp.json()["run"]
    assert run["status"] == "failed" and run["stop_reason"] == "error"
    assert run["error"]["code"] == "outbound_refused" and run["error"]["param"] == "spec.remote"
    assert "far.test" in run["error"]["message"]
    assert not [r for r in caplog.records if r.levelno >= logging.ERROR]  # no traceback
