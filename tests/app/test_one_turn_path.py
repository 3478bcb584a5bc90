"""A session turn is one path whichever door it comes in by: ``POST /v1/sessions/{id}/messages``
and ``/v1/chat/completions`` with ``X-Session-Id`` submit, admit, run and store it alike (the
same statements, the same batched tenant usage, the same budget preflight)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.main import create_app
from app.ops.budget_store import set_tenant_budget
from app.runtime.store import SessionNotFound
from app.schemas.vocab import CancelMode
from app.services import turns
from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent, make_session
from tests.app.test_turn_cost import TURN_COST, counting, engine_of, settle, turn
from tests.lifespan import LifespanManager


@pytest.fixture
async def quiet(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    """An app whose batched tenant usage is not flushed while a test counts statements."""
    application = create_app(settings_factory(usage_flush_s=3600))
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def quiet_client(quiet: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    transport = httpx.ASGITransport(app=quiet)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        yield c


async def chat_turn(
    client: httpx.AsyncClient, sid: str, text: str = "hello", strategy: str | None = None
) -> dict[str, Any]:
    body = {"model": "helper", "messages": [{"role": "user", "content": text}]}
    headers = {"X-Session-Id": sid}
    if strategy is not None:
        headers["X-Multitask-Strategy"] = strategy
    resp = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    return data


async def test_a_chat_turn_on_a_session_costs_what_a_message_turn_costs(
    quiet: FastAPI, quiet_client: httpx.AsyncClient
) -> None:
    client = quiet_client
    await make_agent(client)
    sid = await make_session(client)
    await turn(client, sid, "warm up")  # the session's memory is now kept in process
    await chat_turn(client, sid, "warm up too")
    await settle(quiet)
    engine = engine_of(quiet)
    with counting(engine) as rest:
        await turn(client, sid)
        await settle(quiet)
    pending = quiet.state.agentstation.tenant_usage.pending
    before = pending.get("a", 0)
    with counting(engine) as chat:
        answer = await chat_turn(client, sid)
        await settle(quiet)
    assert answer["choices"][0]["message"]["content"] == "hello"
    assert len(chat.statements) == len(rest.statements), (chat.statements, rest.statements)
    assert chat.transactions == rest.transactions
    statements, transactions = TURN_COST[engine.dialect.name]
    assert len(chat.statements) <= statements and chat.transactions <= transactions
    # The same statements (no lookup of its own: not the agent, the session's usage or the
    # tenant's counter), and a tenant without a budget is charged in batches, not by the turn.
    assert [s.split()[0] for s in chat.statements] == [s.split()[0] for s in rest.statements]
    assert pending.get("a", 0) == before + answer["usage"]["total_tokens"] > before
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory][-2:] == ["hello", "hello"]


async def test_chat_turns_are_charged_in_batches_like_message_turns(
    quiet: FastAPI, quiet_client: httpx.AsyncClient
) -> None:
    client = quiet_client
    await make_agent(client)
    usage = quiet.state.agentstation.tenant_usage
    before = usage.pending.get("a", 0)
    whole = await chat_turn(client, "batched-1")  # created on first use
    await settle(quiet)
    assert whole["usage"]["total_tokens"] > 0
    assert usage.pending.get("a", 0) == before + whole["usage"]["total_tokens"]
    streamed = await client.post(
        "/v1/chat/completions",
        json={
            "model": "helper",
            "messages": [{"role": "user", "content": "again"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
        headers={"X-Session-Id": "batched-1"},
    )
    assert streamed.status_code == 200
    await settle(quiet)
    runs = (await client.get("/v1/sessions/batched-1/runs")).json()["data"]
    spent = sum(r["usage"]["total_tokens"] for r in runs)
    assert len(runs) == 2 and usage.pending.get("a", 0) == before + spent


async def test_a_spent_budget_refuses_both_doors_alike(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The tenant's tokens counted in memory (not yet written) count for both entry points."""
    await make_agent(client)
    sid = await make_session(client)
    spent = (await turn(client, sid))["run"]["usage"]["total_tokens"]
    state = app.state.agentstation
    await state.tenant_usage.flush()
    async with state.sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", 1)  # already spent
    assert spent > 1
    rest = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "more"})
    body = {"model": "helper", "messages": [{"role": "user", "content": "more"}]}
    chat = await client.post("/v1/chat/completions", json=body, headers={"X-Session-Id": sid})
    assert rest.status_code == chat.status_code == 429
    assert rest.json()["error"]["code"] == chat.json()["error"]["code"] == "budget_exceeded"
    assert len((await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]) == 1


async def test_concurrent_first_chat_turns_share_the_session_they_create(
    client: httpx.AsyncClient,
) -> None:
    """The first turns on a new ``X-Session-Id`` create it once; the loser of the race uses the
    winner's session (and queues behind its run), rather than failing."""
    await make_agent(client)
    first, second = await asyncio.gather(
        *(chat_turn(client, "new-1", f"turn {i}", strategy="enqueue") for i in range(2))
    )
    answers = {one["choices"][0]["message"]["content"] for one in (first, second)}
    assert answers == {"turn 0", "turn 1"}
    runs = (await client.get("/v1/sessions/new-1/runs")).json()["data"]
    assert sorted(r["status"] for r in runs) == ["completed", "completed"]


async def test_every_session_door_goes_through_submit_turn(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """POST /messages (whole and streamed) and chat with X-Session-Id submit their turns by
    ``submit_turn`` (its lookup sees each door's request); A2A and SendMessage are covered by
    tests/app/test_a2a.py and test_multiagent_api.py, which run through the same function."""
    seen: list[tuple[str | None, bool, str | None]] = []
    original = turns.prepare_submission

    async def spy(*args: Any, **kwargs: Any) -> Any:
        request: turns.TurnRequest = args[4]
        seen.append((request.source, request.stream, request.strategy))
        return await original(*args, **kwargs)

    monkeypatch.setattr(turns, "prepare_submission", spy)
    await make_agent(client)
    sid = await make_session(client)
    await turn(client, sid, "one")
    streamed = await client.post(
        f"/v1/sessions/{sid}/messages", json={"message": "two", "stream": True}
    )
    assert streamed.status_code == 200 and "run.completed" in streamed.text
    await chat_turn(client, sid, "three", strategy="enqueue")
    await settle(app)
    assert seen == [(None, False, "reject"), (None, True, None), ("openai", False, "enqueue")]


async def test_submit_turn_runs_inline_or_streams_with_per_turn_instructions(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """What a front door of its own (the Responses API) does with ``submit_turn``: a whole
    answer run in the caller's task and read from memory, or the run's events followed; the
    turn's ``instructions`` reach the model (the echo model counts prompt words) on that turn
    only and are never stored in the session's memory."""
    state = app.state.agentstation
    await make_agent(client)
    sid = await make_session(client)
    plain = await turns.submit_turn(state, "a", sid, turns.TurnRequest("hi"))
    assert plain.inline and plain.created
    first = await plain.finish()
    assert first.run.status == "completed" and first.run.output == first.public["output"]
    assert first.public["output"]["content"] == "hi" and first.public["id"] == plain.run_id

    told = turns.TurnRequest(
        "hi",
        stream=True,
        instructions="answer in four words",
        source="responses",
        run_id="resp_" + "ab" * 16,  # a front door may name its runs
        options={"response": {"store": True}},
    )
    streamed = await turns.submit_turn(state, "a", sid, told)
    assert not streamed.inline and streamed.run_id == "resp_" + "ab" * 16
    events = [event async for event in streamed.events()]
    assert events[0].type == "run.created" and events[-1].type == "run.completed"
    second = await streamed.end()
    assert second.run.options["response"] == {"store": True}
    assert second.run.options["source"] == "responses"
    again = await turns.submit_turn(state, "a", sid, turns.TurnRequest("hi"))
    third = await again.finish()
    # Each turn's prompt: the memory so far (+2 one-word messages a turn); the told one also
    # has the instructions' 4 words, the next one has them no more.
    prompts = [end.run.prompt_tokens for end in (first, second, third)]
    assert prompts == [1, 3 + 4, 5], prompts
    stored = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in stored] == ["hi"] * 6
    assert all(m["sender"] != "system" for m in stored)


async def test_submit_turn_creates_the_session_for_its_agent_on_first_use(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    state = app.state.agentstation
    await make_agent(client)
    agent = await state.agents.find(state.sessionmaker, "a", "helper")
    assert agent is not None
    with pytest.raises(SessionNotFound):
        await turns.submit_turn(state, "a", "fresh-1", turns.TurnRequest("hi"), agent=agent)
    turn_ = await turns.submit_turn(
        state, "a", "fresh-1", turns.TurnRequest("hi"), agent=agent, create=True
    )
    end = await turn_.finish()
    assert end.run.status == "completed" and end.run.session_id == "fresh-1"
    session = (await client.get("/v1/sessions/fresh-1")).json()
    assert session["agent"] == "helper"


async def test_a_chat_turn_takes_an_idempotency_key_as_a_message_turn_does(
    client: httpx.AsyncClient,
) -> None:
    """With X-Session-Id, ``Idempotency-Key`` sent again answers the turn it started (whole or
    streamed), never a second run; a key too long is a 400 naming the header."""
    await make_agent(client, model="poet")
    headers = {"X-Session-Id": "keyed-1", "Idempotency-Key": "k-1"}
    body = {"model": "helper", "messages": [{"role": "user", "content": "a poem"}]}
    first = await client.post("/v1/chat/completions", json=body, headers=headers)
    again = await client.post("/v1/chat/completions", json=body, headers=headers)
    assert first.status_code == again.status_code == 200, again.text
    answer = first.json()["choices"][0]["message"]["content"]
    assert answer == "Roses are red."
    assert again.json()["choices"][0]["message"]["content"] == answer
    streamed = await client.post(
        "/v1/chat/completions", json={**body, "stream": True}, headers=headers
    )
    chunks = [
        json.loads(line[6:]) for line in streamed.text.splitlines() if line.startswith("data: {")
    ]
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert streamed.status_code == 200 and text == "Roses are red."
    runs = (await client.get("/v1/sessions/keyed-1/runs")).json()["data"]
    assert len(runs) == 1
    other = await client.post(
        "/v1/chat/completions", json=body, headers={**headers, "Idempotency-Key": "k-2"}
    )
    assert other.json()["choices"][0]["message"]["content"] == "Violets are blue."
    long = await client.post(
        "/v1/chat/completions", json=body, headers={**headers, "Idempotency-Key": "k" * 257}
    )
    assert long.status_code == 400 and long.json()["error"]["param"] == "Idempotency-Key"


async def test_a_run_interrupted_before_its_turn_began_keeps_its_input(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """``interrupt`` keeps what the interrupted run wrote, its input first, also when it lands
    before the run's task took its first step (memory not loaded yet: the input was dropped)."""
    state = app.state.agentstation
    await make_agent(client, model="slow")
    sid = await make_session(client)
    await turn(client, sid, "earlier")  # memory revision > 0: loading it takes a read
    first = await turns.submit_turn(state, "a", sid, turns.TurnRequest("one", stream=True))
    await first.cancel(CancelMode.INTERRUPT)  # before its task's first step
    end = await first.end()
    assert end.run.status == "interrupted" and end.run.stop_reason == "interrupt"
    after = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "two"})
    assert after.json()["run"]["status"] == "completed"
    memory = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory if m["sender"] == "user"] == ["earlier", "one", "two"]
