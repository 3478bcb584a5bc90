"""Runs through ASGITransport: non-stream and SSE responses, event replay, strategies, failures."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import httpx
from fastapi import FastAPI

from agents.agent import AsyncAgent
from agents.schema import AgentMessage
from app.runtime.registry import BuildContext
from app.schemas.agents import AgentSpec
from tests.app.conftest import make_agent, make_session, parse_sse, wait_runs


async def _post(client: httpx.AsyncClient, sid: str, **body: Any) -> httpx.Response:
    body.setdefault("message", "hello there")
    return await client.post(f"/v1/sessions/{sid}/messages", json=body)


async def _wait_status(client: httpx.AsyncClient, sid: str, status: str) -> dict[str, Any]:
    for _ in range(200):
        runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        if runs and runs[0]["status"] == status:
            return dict(runs[0])
        await asyncio.sleep(0.02)
    raise AssertionError(f"no run became {status}")


async def test_non_stream_run_shape(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    resp = await _post(client, sid, message={"content": "hi you", "sender": "user"})
    assert resp.status_code == 200
    run, message = resp.json()["run"], resp.json()["message"]
    assert run["status"] == "completed" and run["stop_reason"] == "end"
    assert run["session_id"] == sid and run["agent"] == "helper"
    assert run["input"]["content"] == "hi you"
    assert run["output"] == message and message["content"] == "hi you"
    assert run["usage"] == {"prompt_tokens": 2, "completion_tokens": 2, "total_tokens": 4}
    assert run["started_at"] and run["finished_at"] and run["error"] is None
    assert (await client.get(f"/v1/runs/{run['id']}")).json() == run
    listed = (await client.get(f"/v1/sessions/{sid}/runs")).json()
    assert [r["id"] for r in listed["data"]] == [run["id"]]


async def test_stream_run_sse_format(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="poet")
    sid = await make_session(client)
    resp = await _post(client, sid, stream=True)
    assert resp.status_code == 200
    assert resp.headers["content-type"].startswith("text/event-stream")
    frames = [f for f in parse_sse(resp.text) if "event" in f]
    run_id = frames[0]["data"]["run"]["id"]
    assert resp.headers["content-location"] == f"/v1/runs/{run_id}"
    assert [int(f["id"]) for f in frames] == list(range(1, len(frames) + 1))
    assert frames[0]["retry"] == "3000"
    types = [f["event"] for f in frames]
    assert types[0] == "run.created" and types[-1] == "run.completed"
    deltas = "".join(f["data"]["delta"] for f in frames if f["event"] == "message.delta")
    assert deltas == "Roses are red."
    messages = [f["data"] for f in frames if f["event"] == "message"]
    assert [(m["index"], m["message"]) for m in messages] == [
        (0, frames[-1]["data"]["run"]["output"])
    ]
    # When its step began, its first chunk and its end came (the timeline), and its tokens.
    final = frames[-1]["data"]["run"]
    (message,) = messages
    times = [  # the message's times are to the millisecond
        datetime.fromisoformat(t).replace(
            microsecond=datetime.fromisoformat(t).microsecond // 1000 * 1000
        )
        for t in (final["started_at"], message["started_at"], message["first_at"], message["at"])
    ]
    assert times == sorted(times) and times[-1] <= datetime.fromisoformat(final["finished_at"])
    assert message["at"].endswith("Z") and len(message["at"]) == len("2026-01-01T00:00:00.000Z")
    assert message["usage"] == {
        "prompt_tokens": final["usage"]["prompt_tokens"],
        "completion_tokens": final["usage"]["completion_tokens"],
    }
    assert final["status"] == "completed"


async def test_events_replay_after_the_run(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="poet")
    sid = await make_session(client)
    run_id = (await _post(client, sid)).json()["run"]["id"]
    everything = parse_sse((await client.get(f"/v1/runs/{run_id}/events")).text)
    events = [f for f in everything if "event" in f]
    assert events[0]["event"] == "run.created" and events[-1]["event"] == "run.completed"
    last = events[-2]["id"]
    tail = parse_sse(
        (await client.get(f"/v1/runs/{run_id}/events", headers={"Last-Event-ID": last})).text
    )
    assert [f["event"] for f in tail if "event" in f] == ["run.completed"]
    tail = parse_sse((await client.get(f"/v1/runs/{run_id}/events", params={"after": 1})).text)
    assert [f["id"] for f in tail if "event" in f] == [e["id"] for e in events[1:]]
    done = parse_sse((await client.get(f"/v1/runs/{run_id}/events", params={"after": 999})).text)
    assert [f for f in done if "event" in f] == [] and done[0]["retry"] == "3000"


async def test_unknown_run_is_404(client: httpx.AsyncClient, client_b: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    run_id = (await _post(client, sid)).json()["run"]["id"]
    for path in (f"/v1/runs/{run_id}", f"/v1/runs/{run_id}/events"):
        assert (await client_b.get(path)).status_code == 404
        assert (await client.get(path.replace(run_id, "run_x"))).status_code == 404
    assert (await client_b.post(f"/v1/runs/{run_id}/cancel")).status_code == 404
    missing = await client.post("/v1/sessions/nope/messages", json={"message": "x"})
    assert missing.status_code == 404


async def test_cancel_finished_run_returns_it(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    run = (await _post(client, sid)).json()["run"]
    resp = await client.post(f"/v1/runs/{run['id']}/cancel")
    assert resp.status_code == 200 and resp.json()["status"] == "completed"


async def test_busy_session_rejects_with_409(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    first = asyncio.create_task(_post(client, sid))
    running = await _wait_status(client, sid, "running")
    second = await _post(client, sid)
    assert second.status_code == 409
    assert second.headers["x-should-retry"] == "false"
    assert second.json()["error"]["code"] == "session_busy"
    cancelled = await client.post(f"/v1/runs/{running['id']}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    resp = await first
    assert resp.json()["run"]["status"] == "cancelled" and resp.json()["message"] is None
    # A cancelled run leaves no trace in memory.
    assert (await client.get(f"/v1/sessions/{sid}/memory")).json() == {"memory": []}


async def test_enqueue_runs_in_order(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    first = asyncio.create_task(_post(client, sid, message="first"))
    await _wait_status(client, sid, "running")
    second = asyncio.create_task(_post(client, sid, message="second", multitask_strategy="enqueue"))
    await wait_runs(client, sid, 2)  # "second" is queued before "third" is sent
    third = asyncio.create_task(_post(client, sid, message="third", multitask_strategy="enqueue"))
    results = [(await t).json()["run"] for t in (first, second, third)]
    assert [r["status"] for r in results] == ["completed"] * 3
    assert results[0]["finished_at"] <= results[1]["started_at"]
    assert results[1]["finished_at"] <= results[2]["started_at"]
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory if m["sender"] == "user"] == ["first", "second", "third"]


async def test_interrupt_keeps_input_and_rollback_drops_it(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    first = asyncio.create_task(_post(client, sid, message="one"))
    await _wait_status(client, sid, "running")
    second = asyncio.create_task(_post(client, sid, message="two", multitask_strategy="interrupt"))
    assert (await first).json()["run"]["status"] == "interrupted"
    await _wait_status(client, sid, "running")
    third = await _post(client, sid, message="three", multitask_strategy="rollback")
    assert third.json()["run"]["status"] == "completed"
    rolled = (await second).json()["run"]
    assert rolled["status"] == "cancelled" and rolled["stop_reason"] == "rollback"
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    # "one" stays (interrupt keeps what the run wrote), "two" is gone (rollback).
    assert [m["content"] for m in memory if m["sender"] == "user"] == ["one", "three"]


async def test_idempotency_key_attaches_to_the_same_run(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    headers = {"Idempotency-Key": "abc-1"}
    one = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"}, headers=headers)
    two = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"}, headers=headers)
    assert one.json()["run"]["id"] == two.json()["run"]["id"]
    assert len((await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]) == 1


async def test_concurrent_requests_with_one_key_make_one_run(client: httpx.AsyncClient) -> None:
    # The key is the tenant's: retries racing each other, even on two sessions, get one run
    # (on PostgreSQL the admission function catches the losing insert's unique violation).
    await make_agent(client)
    sids = [await make_session(client), await make_session(client)]
    headers = {"Idempotency-Key": "race-1"}
    answers = await asyncio.gather(
        *(
            client.post(f"/v1/sessions/{sid}/messages", json={"message": "x"}, headers=headers)
            for sid in sids * 3
        )
    )
    assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
    assert len({a.json()["run"]["id"] for a in answers}) == 1
    counts = [len((await client.get(f"/v1/sessions/{s}/runs")).json()["data"]) for s in sids]
    assert sorted(counts) == [0, 1]


async def test_an_empty_idempotency_key_is_no_key(client: httpx.AsyncClient) -> None:
    # Found by the fuzz test: "" was stored as a key, and the second such turn was a 500.
    await make_agent(client)
    sid = await make_session(client)
    empty = {"Idempotency-Key": ""}
    for _ in range(2):
        resp = await client.post(
            f"/v1/sessions/{sid}/messages", json={"message": "x"}, headers=empty
        )
        assert resp.status_code == 200, resp.text
    assert len((await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]) == 2


async def test_bad_run_requests(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    for body, param in [
        ({}, "message"),
        ({"message": "x", "multitask_strategy": "yolo"}, "multitask_strategy"),
        ({"message": "x", "on_disconnect": "explode"}, "on_disconnect"),
        ({"message": "x", "gen_params": {"temperature": -1}}, "gen_params.temperature"),
        ({"message": {"sender": "user"}}, "message"),
    ]:
        resp = await client.post(f"/v1/sessions/{sid}/messages", json=body)
        assert resp.status_code == 422, body
        assert resp.json()["error"]["param"].startswith(param), resp.json()


class _Broken:
    """An agent whose model call fails."""

    def state_dict(self, session_id: Any = 0) -> dict[str, Any]:
        return {"memory": []}

    def load_state_dict(self, state: dict[str, Any], session_id: Any = 0) -> None:
        pass

    async def stream(
        self, message: Any, session_id: Any = 0, **kw: Any
    ) -> AsyncIterator[AgentMessage]:
        yield AgentMessage(sender="Broken", content="partial", stream_state=1)
        raise RuntimeError("model exploded")


async def test_failing_agent_ends_run_failed(app: FastAPI, client: httpx.AsyncClient) -> None:
    app.state.agentstation.registry.add_kind("broken", lambda spec, ctx: _Broken())
    await make_agent(client, kind="broken")
    sid = await make_session(client)
    run = (await _post(client, sid)).json()["run"]
    assert run["status"] == "failed"
    # The exception's words stay in the log (tests/app/test_error_leaks.py).
    assert run["error"]["code"] == "internal_error" and run["error"]["request_id"]
    frames = parse_sse((await client.get(f"/v1/runs/{run['id']}/events")).text)
    assert frames[-1]["event"] == "run.failed"
    assert frames[-1]["data"]["error"] == run["error"]
    assert (await client.get(f"/v1/sessions/{sid}/memory")).json() == {"memory": []}


async def test_deleting_a_busy_session_cancels_its_run(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    pending = asyncio.create_task(_post(client, sid))
    run = await _wait_status(client, sid, "running")
    assert (await client.delete(f"/v1/sessions/{sid}")).status_code == 204
    answer = await asyncio.wait_for(pending, 5)  # the waiting request is released too
    if answer.status_code == 200:  # it may read the run before the delete commits
        assert answer.json()["run"]["status"] == "cancelled"
    else:
        assert answer.status_code == 404
    assert (await client.get(f"/v1/runs/{run['id']}")).status_code == 404


class _Duo(AsyncAgent):
    """A composite agent whose sub-agent's memory stays empty (no rows are stored for it)."""

    def __init__(self, llm: Any, name: str | None) -> None:
        super().__init__(llm=llm, name=name)
        self.critic = AsyncAgent(llm=llm, name="critic")


async def test_composite_agent_state_round_trips(app: FastAPI, client: httpx.AsyncClient) -> None:
    def build(spec: AgentSpec, ctx: BuildContext) -> Any:
        return _Duo(ctx.llms[spec.model or ""], ctx.name)

    app.state.agentstation.registry.add_kind("duo", build)
    await make_agent(client, "pair", kind="duo")
    sid = await make_session(client, "pair")
    for text in ("one", "two"):
        assert (await _post(client, sid, message=text)).json()["run"]["status"] == "completed"
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert [m["content"] for m in memory["memory"]] == ["one", "one", "two", "two"]
    assert memory["critic.memory"] == []
    ok = await client.put(f"/v1/sessions/{sid}/memory", json={"critic.memory": []})
    assert ok.status_code == 200  # a key of this agent


async def test_deleting_an_agent_cancels_its_runs(client: httpx.AsyncClient) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    pending = asyncio.create_task(_post(client, sid))
    run = await _wait_status(client, sid, "running")
    assert (await client.delete("/v1/agents/helper")).status_code == 204
    await asyncio.wait_for(pending, 5)
    assert (await client.get(f"/v1/runs/{run['id']}")).status_code == 404
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404


async def test_message_checks_in_fastapis_order(client: httpx.AsyncClient) -> None:
    """The endpoint parses its body and headers itself, in FastAPI's order: JSON syntax, key,
    then the header's and the body's errors (the header's named first)."""
    await make_agent(client)
    sid = await make_session(client)
    url = f"/v1/sessions/{sid}/messages"
    bad_json = await client.post(
        url, content=b"{", headers={"content-type": "application/json", "authorization": "x"}
    )
    assert bad_json.status_code == 400 and bad_json.json()["error"]["code"] == "invalid_json"
    no_key = await client.post(url, json={}, headers={"authorization": "Bearer nope"})
    assert no_key.status_code == 401
    long_key = {"Idempotency-Key": "k" * 257}
    both = await client.post(url, json={}, headers=long_key)
    assert both.status_code == 422 and both.json()["error"]["param"] == "Idempotency-Key"
    ok = await client.post(url, json={"message": "x"}, headers={"Idempotency-Key": "k" * 256})
    assert ok.status_code == 200
    operation = (await client.get("/openapi.json")).json()["paths"][
        "/v1/sessions/{session_id}/messages"
    ]["post"]
    assert [p["name"] for p in operation["parameters"]] == ["session_id", "Idempotency-Key"]
    assert operation["security"] == [{"bearerAuth": []}]  # the key (app.openapi)
    schema = operation["requestBody"]["content"]["application/json"]["schema"]
    assert schema["required"] == ["message"]
