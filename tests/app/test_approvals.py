"""Runs that wait for a person's approval of tool calls (issue 15), on SQLite and PostgreSQL."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest

from app.main import create_app
from app.settings import Settings
from tests.app.approval_helpers import (
    CALCULATOR_AGENT,
    calculator_call,
    session_memory,
    until_ended,
)
from tests.app.conftest import KEY_A, KEY_B, MODELS, make_session, parse_sse
from tests.lifespan import LifespanManager

CALC = {
    "name": "calc",
    "backend": "scripted",
    "replies": [calculator_call("6 * 7"), "The answer is 42."],
}
SPEC = {**CALCULATOR_AGENT, "approval": {"tools": ["Calculator"]}}


@pytest.fixture
async def clients(
    settings_factory: Callable[..., Settings],
) -> AsyncIterator[tuple[httpx.AsyncClient, httpx.AsyncClient]]:
    models = json.dumps([*MODELS, CALC])
    app = create_app(settings_factory(models=models, approval_check_s=0.1))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with (
            httpx.AsyncClient(
                transport=transport,
                base_url="http://a",
                headers={"Authorization": f"Bearer {KEY_A}"},
            ) as a,
            httpx.AsyncClient(
                transport=transport,
                base_url="http://b",
                headers={"Authorization": f"Bearer {KEY_B}"},
            ) as b,
        ):
            yield a, b


async def _agent(client: httpx.AsyncClient, name: str = "calc", **extra: Any) -> None:
    resp = await client.post("/v1/agents", json={"name": name, "spec": {**SPEC, **extra}})
    assert resp.status_code == 201, resp.text


async def _waiting(client: httpx.AsyncClient, sid: str) -> dict[str, Any]:
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "6 times 7?"})
    assert resp.status_code == 200, resp.text
    run: dict[str, Any] = resp.json()["run"]
    assert run["status"] == "requires_action" and run["stop_reason"] == "requires_action"
    assert run["finished_at"] is None
    return run


async def _paused(client: httpx.AsyncClient) -> tuple[str, dict[str, Any]]:
    """A new session of the agent ``calc`` (stored here) and its run waiting for a decision."""
    await _agent(client)
    sid = await make_session(client, "calc")
    return sid, await _waiting(client, sid)


async def test_a_run_waits_and_approval_completes_it_on_the_same_event_log(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, other = clients
    sid, run = await _paused(client)
    calls = run["required_action"]["tool_calls"]
    assert [(c["name"], c["arguments"]) for c in calls] == [("Calculator", {"expression": "6 * 7"})]
    call_id = calls[0]["id"]

    got = (await client.get(f"/v1/runs/{run['id']}")).json()
    assert got["status"] == "requires_action" and got["required_action"]["tool_calls"] == calls
    assert (await other.get(f"/v1/runs/{run['id']}")).status_code == 404
    # The call is stored, no result: nothing ran.
    assert [m["sender"] for m in await session_memory(client, sid)] == ["user", "calc"]
    events = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
    assert events[-1]["event"] == "run.requires_action"
    assert events[-1]["data"]["tool_calls"] == calls
    paused_at = int(events[-1]["id"])

    # Busy while it waits: reject and enqueue both answer 409.
    for strategy in ("reject", "enqueue"):
        busy = await client.post(
            f"/v1/sessions/{sid}/messages",
            json={"message": "hello?", "multitask_strategy": strategy},
        )
        assert busy.status_code == 409 and busy.json()["error"]["code"] == "session_busy"

    url = f"/v1/runs/{run['id']}/resume"
    approve = {"decisions": [{"id": call_id, "action": "approve"}]}
    assert (await other.post(url, json=approve)).status_code == 404
    bad = await client.post(url, json={"decisions": [{"id": "call_nope", "action": "approve"}]})
    assert bad.status_code == 422 and bad.json()["error"]["param"] == "decisions[0].id"
    edit = {"decisions": [{"id": call_id, "action": "edit", "arguments": {"expression": 5}}]}
    bad = await client.post(url, json=edit)
    assert bad.status_code == 422, bad.text
    assert bad.json()["error"]["param"] == "decisions[0].arguments.expression"

    resp = await client.post(url, json={**approve, "stream": True})
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    resumed = parse_sse(resp.text)
    assert int(resumed[0]["id"]) == paused_at + 1  # ids go on from the pause
    assert resumed[-1]["event"] == "run.completed"
    final = resumed[-1]["data"]["run"]
    assert final["output"]["content"] == "The answer is 42." and final["required_action"] is None
    memory = await session_memory(client, sid)
    assert [m["sender"] for m in memory] == ["user", "calc", "AsyncActionExecutor", "calc"]
    assert "42" in str(memory[2]["content"])  # the tool ran once approved

    again = await client.post(url, json=approve)
    assert again.status_code == 409 and again.json()["error"]["code"] == "run_not_waiting"
    # The whole log, in order, from the start and from the pause (Last-Event-ID).
    log = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
    assert [int(e["id"]) for e in log] == list(range(1, len(log) + 1))
    types = [e["event"] for e in log]
    assert types[0] == "run.created" and types[-1] == "run.completed"
    assert types.index("run.requires_action") == paused_at - 1
    tail = await client.get(
        f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": str(paused_at)}
    )
    strip = [{k: v for k, v in e.items() if k != "retry"} for e in parse_sse(tail.text)]
    assert strip == [{k: v for k, v in e.items() if k != "retry"} for e in log[paused_at:]]
    usage = (await client.get(f"/v1/runs/{run['id']}")).json()["usage"]
    assert usage["completion_tokens"] > 0
    metrics = (await client.get("/metrics")).text
    assert 'agentstation_approval_wait_seconds_count{outcome="resumed"} 1.0' in metrics
    assert 'agentstation_runs_total{status="requires_action"}' not in metrics


async def test_metrics_count_waiting_runs(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, _ = clients
    await _agent(client)
    await _waiting(client, await make_session(client, "calc"))
    for _ in range(100):  # counted by the periodic check (every 0.1 s here)
        if "agentstation_runs_waiting_approval 1.0" in (await client.get("/metrics")).text:
            return
        await asyncio.sleep(0.05)
    raise AssertionError((await client.get("/metrics")).text)


async def test_deny_and_edit(clients: tuple[httpx.AsyncClient, httpx.AsyncClient]) -> None:
    client, _ = clients
    sid, run = await _paused(client)
    call_id = run["required_action"]["tool_calls"][0]["id"]
    deny = {"id": call_id, "action": "deny", "message": "use mental arithmetic"}
    resp = await client.post(f"/v1/runs/{run['id']}/resume", json={"decisions": [deny]})
    assert resp.status_code == 202 and resp.json()["status"] in ("queued", "running", "completed")
    done = await _until_final(client, run["id"])
    assert done["status"] == "completed"
    result = (await session_memory(client, sid))[2]["content"]
    assert "denied" in result and "use mental arithmetic" in result and "42" not in result

    run = await _waiting(client, sid)
    call_id = run["required_action"]["tool_calls"][0]["id"]
    edit = {"id": call_id, "action": "edit", "arguments": {"expression": "100 + 1"}}
    resp = await client.post(f"/v1/runs/{run['id']}/resume", json={"decisions": [edit]})
    assert resp.status_code == 202, resp.text
    assert (await _until_final(client, run["id"]))["status"] == "completed"
    assert "101" in str((await session_memory(client, sid))[-2]["content"])


async def _until_final(client: httpx.AsyncClient, run_id: str) -> dict[str, Any]:
    """The run once it is neither queued nor running (a pause counts)."""
    return await until_ended(client, run_id, pending=("queued", "running"), tries=500)


async def test_interrupt_cancels_a_waiting_run_cleanly(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, _ = clients
    sid, run = await _paused(client)
    resp = await client.post(
        f"/v1/sessions/{sid}/messages",
        json={"message": "forget it", "multitask_strategy": "interrupt"},
    )
    assert resp.status_code == 200, resp.text
    assert resp.json()["run"]["status"] == "completed"  # the model's next scripted reply
    old = (await client.get(f"/v1/runs/{run['id']}")).json()
    assert old["status"] == "interrupted" and old["required_action"] is None
    events = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
    assert [e["event"] for e in events][-2:] == ["run.requires_action", "run.cancelled"]
    assert "run.gap" not in [e["event"] for e in events]
    # The waiting run's messages are gone: the memory holds only the new run's.
    contents = [m["content"] for m in await session_memory(client, sid)]
    assert contents == ["forget it", "The answer is 42."]
    gone = await client.post(
        f"/v1/runs/{run['id']}/resume",
        json={"decisions": [{"id": old["id"], "action": "approve"}]},
    )
    assert gone.status_code == 409


async def test_a_timeout_denies_or_cancels(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, _ = clients
    await _agent(client, approval={"tools": "all", "timeout_s": 1})
    sid = await make_session(client, "calc")
    run = await _waiting(client, sid)
    assert run["required_action"]["deadline"] is not None
    done = await until_ended(client, run["id"])
    assert done["status"] == "completed"
    assert "in time" in str((await session_memory(client, sid))[2]["content"])

    await _agent(client, "calc2", approval={"tools": "all", "timeout_s": 1, "on_timeout": "cancel"})
    sid = await make_session(client, "calc2")
    run = await _waiting(client, sid)
    done = await until_ended(client, run["id"])
    assert done["status"] == "cancelled" and done["stop_reason"] == "approval_timeout"
    assert await session_memory(client, sid) == []


async def test_approval_is_for_tool_agents(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, _ = clients
    spec = {"kind": "agent", "model": "echo", "approval": {"tools": "all"}}
    resp = await client.post("/v1/agents", json={"name": "plain", "spec": spec})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.approval"
    spec = {
        "kind": "tool_agent",
        "model": "calc",
        "tools": [{"name": "Calculator", "requires_approval": True}],
    }
    assert (await client.post("/v1/agents", json={"name": "t", "spec": spec})).status_code == 201
    sid = await make_session(client, "t")
    await _waiting(client, sid)


async def test_approval_is_for_the_agent_a_session_talks_to(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, _ = clients
    outer = {"kind": "tool_agent", "model": "calc", "sub_agents": {"inner": SPEC}}
    resp = await client.post("/v1/agents", json={"name": "outer", "spec": outer})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["param"] == "spec.sub_agents.inner.approval"
    # Statelessly (no X-Session-Id) nothing could wait for a decision: refused.
    await _agent(client)
    chat = {"model": "calc", "messages": [{"role": "user", "content": "6*7?"}]}
    resp = await client.post("/v1/chat/completions", json=chat)
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "X-Session-Id"


async def test_cancel_put_memory_and_racing_decisions(
    clients: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    client, _ = clients
    sid, run = await _paused(client)
    put = await client.put(f"/v1/sessions/{sid}/memory", json={"memory": []})
    assert put.status_code == 409 and put.json()["error"]["code"] == "session_busy"
    cancelled = (await client.post(f"/v1/runs/{run['id']}/cancel")).json()
    assert cancelled["status"] == "cancelled" and cancelled["required_action"] is None
    assert await session_memory(client, sid) == []  # as before the run

    sid = await make_session(client, "calc")
    done = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert done.json()["run"]["status"] == "completed"  # the script's answer, then a call
    run = await _waiting(client, sid)
    decision = {
        "decisions": [{"id": run["required_action"]["tool_calls"][0]["id"], "action": "approve"}]
    }
    url = f"/v1/runs/{run['id']}/resume"
    answers = await asyncio.gather(*[client.post(url, json=decision) for _ in range(3)])
    assert sorted(a.status_code for a in answers) == [202, 409, 409]
    assert (await _until_final(client, run["id"]))["status"] == "completed"


async def test_a_resumed_run_may_wait_again(settings_factory: Callable[..., Settings]) -> None:
    replies = [calculator_call("6 * 7"), calculator_call("42 + 1"), "It is 43."]
    twice = {**CALC, "name": "calc", "replies": replies}
    app = create_app(settings_factory(models=json.dumps([*MODELS, twice])))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://a", headers=headers
        ) as c:
            await _agent(c)
            sid = await make_session(c, "calc")
            run = await _waiting(c, sid)
            url = f"/v1/runs/{run['id']}/resume"
            for expression in ("6 * 7", "42 + 1"):
                got = (await c.get(f"/v1/runs/{run['id']}")).json()
                call = got["required_action"]["tool_calls"][0]
                assert call["arguments"] == {"expression": expression}
                body = {"decisions": [{"id": call["id"], "action": "approve"}], "stream": True}
                frames = parse_sse((await c.post(url, json=body)).text)
            assert frames[-1]["event"] == "run.completed"
            assert frames[-1]["data"]["run"]["output"]["content"] == "It is 43."
            log = parse_sse((await c.get(f"/v1/runs/{run['id']}/events")).text)
    assert [int(e["id"]) for e in log] == list(range(1, len(log) + 1))
    assert [e["event"] for e in log].count("run.requires_action") == 2
    assert log[-1]["event"] == "run.completed"
