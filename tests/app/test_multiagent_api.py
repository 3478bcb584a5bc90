"""Multi-agent agents over REST: a ``task`` whose participants are stored agents by name."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODELS, make_session, parse_sse
from tests.lifespan import LifespanManager

TEAM = [
    {"name": "teacher", "backend": "scripted", "replies": ["What is 2+3?", "Right. What is 10-4?"]},
    {"name": "student", "backend": "scripted", "replies": ["5", "6"]},
    {"name": "student2", "backend": "scripted", "replies": ["five"]},
    {"name": "critic", "backend": "scripted", "replies": ["Looks right."]},
    {
        "name": "caller",
        "backend": "scripted",
        "replies": [
            '```json\n{"name": "critic", "parameters": {"message": "Is 2+2=4?"}}\n```\n',
            "The critic agrees.",
        ],
    },
    {
        "name": "alice",
        "backend": "scripted",
        "replies": [
            '```json\n{"name": "SendMessage", "parameters": '
            '{"recipient": "bob-1", "message": "What is 2 + 2?"}}\n```\n',
            "Bob says: 2 + 2 = 4. TERMINATE",
        ],
    },
    {"name": "bob", "backend": "scripted", "replies": ["2 + 2 = 4"]},
    {"name": "finisher", "backend": "scripted", "replies": ["Ask the pupil", "It is 4. DONE"]},
    {"name": "drawl", "backend": "scripted", "replies": ["w " * 200], "chunk_delay_s": 0.02},
]


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    application = create_app(settings_factory(models=json.dumps(MODELS + TEAM)))
    async with LifespanManager(application):
        yield application


async def _agent(client: httpx.AsyncClient, name: str, spec: dict[str, Any]) -> httpx.Response:
    return await client.post("/v1/agents", json={"name": name, "spec": spec})


async def _classroom(client: httpx.AsyncClient, turns: int = 4) -> None:
    assert (await _agent(client, "pupil", {"model": "student"})).status_code == 201
    teacher = {
        "kind": "task",
        "agent": {"model": "teacher", "system_prompt": "Ask short sums."},
        "sub_tasks": [{"agent": "pupil"}],
        "max_turns": turns,
    }
    assert (await _agent(client, "classroom", teacher)).status_code == 201


def _events(text: str) -> list[dict[str, Any]]:
    return [{k: f[k] for k in ("id", "event", "data")} for f in parse_sse(text) if "event" in f]


async def test_a_task_streams_every_participant_and_resumes_exactly(
    client: httpx.AsyncClient,
) -> None:
    await _classroom(client)
    sid = await make_session(client, "classroom")
    resp = await client.post(
        f"/v1/sessions/{sid}/messages", json={"message": "Start", "stream": True}
    )
    events = _events(resp.text)
    said = [
        (
            e["data"]["message"]["sender"],
            e["data"]["message"]["receiver"],
            e["data"]["message"]["content"],
        )
        for e in events
        if e["event"] == "message"
    ]
    assert said == [
        ("classroom", "pupil", "What is 2+3?"), ("pupil", "classroom", "5"),
        ("classroom", "pupil", "Right. What is 10-4?"), ("pupil", "user", "6"),
    ]  # fmt: skip
    senders = {e["data"]["sender"] for e in events if e["event"] == "message.delta"}
    assert senders == {"classroom", "pupil"}
    run = events[-1]["data"]["run"]
    assert run["status"] == "completed" and run["output"]["extra_info"]["status"] == "MAX_TURNS"
    assert run["usage"]["total_tokens"] > 0  # every participant's model calls count
    middle = events[len(events) // 2]["id"]
    tail = _events(
        (await client.get(f"/v1/runs/{run['id']}/events", headers={"Last-Event-ID": middle})).text
    )
    assert tail == events[len(events) // 2 + 1 :]
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert [m["content"] for m in memory["pupil.agent.memory"]] == [
        "What is 2+3?", "5", "Right. What is 10-4?", "6",
    ]  # fmt: skip
    assert [(m["sender"], m["content"]) for m in memory["agent.memory"]][:3] == [
        ("user", "Start"), ("classroom", "What is 2+3?"), ("pupil", "5"),
    ]  # fmt: skip


async def test_named_participants_are_pinned_when_the_session_starts(
    client: httpx.AsyncClient,
) -> None:
    await _classroom(client, turns=2)
    old = await make_session(client, "classroom")
    update = await client.put("/v1/agents/pupil", json={"spec": {"model": "student2"}})
    assert update.status_code == 200
    new = await make_session(client, "classroom")

    async def answer(sid: str) -> str:
        resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "Start"})
        return str(resp.json()["run"]["output"]["content"])

    assert (await answer(old), await answer(new)) == ("5", "five")


async def test_bad_references_are_422(client: httpx.AsyncClient) -> None:
    await _classroom(client)
    missing = await _agent(client, "x", {"kind": "task", "agent": "nobody"})
    assert missing.status_code == 422
    assert (missing.json()["error"]["param"], missing.json()["error"]["code"]) == (
        "spec.agent",
        "unknown_agent",
    )
    cycle = await client.put(
        "/v1/agents/pupil", json={"spec": {"model": "student", "sub_agents": {"t": "classroom"}}}
    )
    assert cycle.status_code == 422 and cycle.json()["error"]["code"] == "agent_cycle"
    no_agent = await _agent(client, "y", {"kind": "task"})
    assert no_agent.json()["error"]["param"] == "spec.agent"
    bad_rule = await _agent(
        client, "z", {"kind": "task", "agent": "pupil", "done": {"if_response": ["ghost"]}}
    )
    assert bad_rule.json()["error"]["param"] == "spec.done.if_response"
    stray = await _agent(client, "w", {"model": "student", "max_turns": 3})
    assert (stray.json()["error"]["param"], stray.json()["error"]["code"]) == (
        "spec.max_turns",
        "not_supported",
    )


async def test_cancel_stops_every_participant_within_a_second(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    assert (await _agent(client, "talker", {"model": "drawl"})).status_code == 201
    spec = {"kind": "task", "agent": {"model": "teacher"}, "sub_tasks": [{"agent": "talker"}]}
    assert (await _agent(client, "panel", spec)).status_code == 201
    sid = await make_session(client, "panel")
    posting = asyncio.create_task(
        client.post(f"/v1/sessions/{sid}/messages", json={"message": "go"})
    )
    run_id = ""
    while not run_id:
        runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        run_id = runs[0]["id"] if runs and runs[0]["status"] == "running" else ""
        await asyncio.sleep(0.01)
    manager = app.state.agentstation.run_manager
    async for event in manager.follow(run_id, 0):  # live: until the sub-agent is talking
        if event.type == "message.delta" and event.data["sender"] == "talker":
            break
    started = time.monotonic()
    cancelled = await client.post(f"/v1/runs/{run_id}/cancel")
    assert cancelled.json()["status"] == "cancelled"
    answer = await asyncio.wait_for(posting, 5)
    assert time.monotonic() - started < 1.0
    assert answer.json()["run"]["status"] == "cancelled"
    events = _events((await client.get(f"/v1/runs/{run_id}/events")).text)
    await asyncio.sleep(0.1)  # five chunk periods of the talker: nothing more may appear
    assert _events((await client.get(f"/v1/runs/{run_id}/events")).text) == events
    assert events[-1]["event"] == "run.cancelled"
    said = "".join(e["data"]["delta"] for e in events if e["event"] == "message.delta"
                   and e["data"]["sender"] == "talker")  # fmt: skip
    assert 0 < len(said.split()) < 200  # cut off mid-answer


async def test_built_in_kinds_use_their_named_sub_agents(client: httpx.AsyncClient) -> None:
    assert (await _agent(client, "reviewer", {"model": "critic"})).status_code == 201
    asker = {"kind": "tool_agent", "model": "caller", "sub_agents": {"critic": "reviewer"}}
    assert (await _agent(client, "asker", asker)).status_code == 201
    sid = await make_session(client, "asker")
    run = (await client.post(f"/v1/sessions/{sid}/messages", json={"message": "2+2?"})).json()
    assert run["message"]["content"] == "The critic agrees."
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert [m["content"] for m in memory["critic.memory"]] == ["Is 2+2=4?", "Looks right."]
    assert memory["memory"][2]["content"] == "Looks right."  # the tool result the model read

    writer = {"model": "teacher", "sub_agents": {"critic": "reviewer"}}
    assert (await _agent(client, "writer", writer)).status_code == 201
    sid = await make_session(client, "writer")
    body = {"message": "Write", "stream": True}
    events = _events((await client.post(f"/v1/sessions/{sid}/messages", json=body)).text)
    said = [
        (e["data"]["message"]["sender"], e["data"]["message"]["content"])
        for e in events
        if e["event"] == "message"
    ]
    assert said == [
        ("writer", "What is 2+3?"), ("critic", "Looks right."), ("writer", "Right. What is 10-4?"),
    ]  # fmt: skip


async def test_alice_forwards_to_bob_in_another_session_until_terminate(
    client: httpx.AsyncClient,
) -> None:
    """Byzer-Agent's README example across two sessions: Alice asks Bob (by his session's id)
    through SendMessage, reads his reply, and her TERMINATE ends her task."""
    assert (await _agent(client, "bob", {"model": "bob"})).status_code == 201
    alice = {
        "kind": "task",
        "agent": {"kind": "tool_agent", "model": "alice", "tools": [{"name": "SendMessage"}]},
        "done": {"contains": "TERMINATE"},
    }
    assert (await _agent(client, "alice", alice)).status_code == 201
    await make_session(client, "bob", id="bob-1")
    await make_session(client, "alice", id="alice-1")
    body = {"message": "Ask Bob what 2 + 2 is.", "stream": True}
    events = _events((await client.post("/v1/sessions/alice-1/messages", json=body)).text)
    said = [
        (m["sender"], m["receiver"], m["content"])
        for m in (e["data"]["message"] for e in events if e["event"] == "message")
    ]
    assert said[1:] == [
        ("SendMessage", "alice", "2 + 2 = 4"),
        ("alice", "user", "Bob says: 2 + 2 = 4. TERMINATE"),
    ]
    assert events[-1]["data"]["run"]["output"]["extra_info"]["status"] == "DONE"
    bobs = (await client.get("/v1/sessions/bob-1/runs")).json()["data"]
    assert [(r["input"]["sender"], r["output"]["content"]) for r in bobs] == [
        ("alice-1", "2 + 2 = 4")
    ]
    memory = (await client.get("/v1/sessions/bob-1/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["What is 2 + 2?", "2 + 2 = 4"]


async def test_a_sessions_memory_stays_readable_after_a_participant_is_deleted(
    client: httpx.AsyncClient,
) -> None:
    await _classroom(client, turns=2)
    sid = await make_session(client, "classroom")
    sent = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "Start"})
    assert sent.status_code == 200, sent.text
    before = (await client.get(f"/v1/sessions/{sid}/memory")).json()
    assert (await client.delete("/v1/agents/pupil")).status_code == 204
    # Reading what was said never needs the agent to be buildable (it was a 422).
    after = await client.get(f"/v1/sessions/{sid}/memory")
    assert after.status_code == 200, after.text
    assert {k: v for k, v in after.json().items() if v} == {k: v for k, v in before.items() if v}
    # A new turn does need it: the session's agent names an agent that is gone.
    turn = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "Again"})
    assert turn.status_code == 422 and turn.json()["error"]["code"] == "unknown_agent"


async def test_a_served_task_follows_langroid_string_signals(client: httpx.AsyncClient) -> None:
    assert (await _agent(client, "pupil", {"model": "bob"})).status_code == 201
    spec = {"kind": "task", "agent": {"model": "finisher"}, "sub_tasks": [{"agent": "pupil"}]}
    assert (await _agent(client, "lead", spec)).status_code == 201
    sid = await make_session(client, "lead")
    body = (await client.post(f"/v1/sessions/{sid}/messages", json={"message": "2+2?"})).json()
    assert body["run"]["status"] == "completed"
    # DONE ends the task; its result is the reply without the word (langroid's Task.result).
    assert body["message"]["content"] == "It is 4."
    assert body["message"]["extra_info"]["status"] == "DONE"
