"""Answering an approval makes a new response, as OpenAI does (SQLite and PostgreSQL).

A stored agent whose tool call waits for a person stops with an ``mcp_approval_request`` item
(the response ``completed``); ``mcp_approval_response`` items with that response's id as
``previous_response_id`` make a new response: its own id, ``previous_response_id`` the waiting
one, only the resumed run's new items, its stream numbered from 0. The waiting response stays
as it was. Through the official ``openai`` client; every body and event validated against its
models (``Response``, ``ResponseStreamEvent``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI

from app.db.migrate import upgrade
from app.main import create_app
from app.services.responses_events import GAP_STRIDE, ResponseStream
from app.services.responses_read import base_of
from tests.app.approval_helpers import (
    APPROVAL,
    CALC,
    CALCULATOR_AGENT,
    app,  # noqa: F401 (the fixture: the calculator models)
    approval_agent,
    approve,
    decision,
    dump,
    paused,
    waiting_response,
)
from tests.app.conftest import (
    KEY_A,
    KEY_B,
    MODELS,
    _drop_pg_database,
    _fresh_pg_database,
    client_for,
    make_settings,
)
from tests.app.test_responses import EVENTS, valid, valid_events
from tests.lifespan import LifespanManager

# Slow to answer: the new response still runs while another replica streams it.
SLOW = {**CALC, "name": "slowcalc", "chunk_delay_s": 0.05}


async def test_an_approval_streams_a_new_response_and_the_waiting_one_stays(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    [request] = waiting.output
    assert request.type == "mcp_approval_request" and request.name == "Calculator"
    assert json.loads(request.arguments) == {"expression": "6 * 7"}
    raw = await client.post(
        "/v1/responses",
        json={
            "model": "careful",
            "previous_response_id": waiting.id,
            "stream": True,
            "metadata": {"step": "approve"},
            "instructions": "Not used: the run goes on as it started.",
            "input": [decision(request.id)],
        },
    )
    assert raw.status_code == 200, raw.text
    assert raw.headers["X-Session-Id"].startswith("chain_")
    events = valid_events(raw.text)  # also through the openai package's stream accumulator
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    done = valid(events[-1]["response"])
    assert done.id != waiting.id and done.id.startswith("resp_") and len(done.id) == 37
    assert done.id[5:21] == waiting.id[5:21]  # the chain's route key
    assert done.previous_response_id == waiting.id
    assert done.metadata == {"step": "approve"}
    assert done.instructions == waiting.instructions and done.model == waiting.model
    assert done.status == "completed"
    call, answer = done.output  # only the new items
    assert call.type == "mcp_call" and call.name == "Calculator" and call.output == "42"
    assert call.approval_request_id == request.id  # the request it answered (OpenAI's field)
    assert answer.type == "message" and done.output_text == "The answer is 42."
    assert done.usage is not None and waiting.usage is not None
    assert done.usage.output_tokens > 0
    run = (await client.get(f"/v1/runs/{waiting.id}")).json()  # one run, its usage split
    assert run["usage"]["completion_tokens"] == (
        waiting.usage.output_tokens + done.usage.output_tokens
    )
    assert run["usage"]["prompt_tokens"] == waiting.usage.input_tokens + done.usage.input_tokens
    assert {e["item"]["id"] for e in events if "item" in e} == {call.id, answer.id}

    # The waiting response is as it was answered: paused, with its approval request.
    assert dump(await oai.responses.retrieve(waiting.id)) == dump(waiting)
    replay = [e async for e in await oai.responses.retrieve(waiting.id, stream=True)]
    assert replay[-1].type == "response.completed"
    assert dump(replay[-1].response) == dump(waiting)  # type: ignore[union-attr]
    # The new one, retrieved and replayed: the same response, the same numbered events.
    again = await oai.responses.retrieve(done.id)
    assert dump(again) == dump(done)
    tail = await client.get(f"/v1/responses/{done.id}?stream=true&starting_after=1")
    assert valid_events(tail.text) == events[2:]
    resumed = [e async for e in await oai.responses.retrieve(done.id, stream=True)]
    assert [e.sequence_number for e in resumed] == list(range(len(events)))
    items = await oai.responses.input_items.list(done.id)
    [item] = items.data
    assert item.type == "mcp_approval_response" and item.approval_request_id == request.id
    assert (await oai.responses.input_items.list(waiting.id)).data[0].type == "message"


async def test_a_denial_also_makes_a_new_response(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    deny = decision(waiting.output[0].id, approve=False, reason="not now")
    with pytest.raises(openai.BadRequestError) as missing:
        await oai.responses.create(model="careful", input=[deny])  # type: ignore[list-item]
    assert missing.value.body["param"] == "previous_response_id"  # type: ignore[index]
    denied = await oai.responses.create(
        model="careful",
        input=[deny],  # type: ignore[list-item]
        previous_response_id=waiting.id,
    )
    valid(dump(denied))
    assert denied.id != waiting.id and denied.previous_response_id == waiting.id
    assert denied.status == "completed"
    # The denied call did not run: no mcp_call item (as Hugging Face's responses.js, an
    # implementation of OpenAI's API, answers: only approved requests become calls); the
    # decision is the new response's input item, the model's answer its output.
    [answer] = denied.output
    assert answer.type == "message" and denied.output_text == "The answer is 42."
    [item] = (await oai.responses.input_items.list(denied.id)).data
    assert item.type == "mcp_approval_response" and item.approve is False
    assert item.approval_request_id == waiting.output[0].id
    log = (await client.get(f"/v1/runs/{waiting.id}/events")).text
    assert "The user denied this tool call. not now" in log  # what the model read instead
    assert dump(await oai.responses.retrieve(waiting.id)) == dump(waiting)
    for previous in (waiting.id, denied.id):  # answered: neither waits any more
        with pytest.raises(openai.ConflictError) as again:
            await oai.responses.create(
                model="careful",
                input=[deny],  # type: ignore[list-item]
                previous_response_id=previous,
            )
        assert again.value.code == "run_not_waiting"


async def test_a_run_that_pauses_twice_is_three_responses(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client, "twice", "twice")
    first = await approve(oai, waiting, "twice")
    valid(dump(first))
    # It ran the first call and waits again: a response of its own, paused.
    assert [i.type for i in first.output] == ["mcp_call", "mcp_approval_request"]
    assert first.status == "completed" and first.previous_response_id == waiting.id
    assert json.loads(first.output[1].arguments) == {"expression": "2 + 3"}  # type: ignore[union-attr]
    raw = await client.post(
        "/v1/responses",
        json={
            "model": "twice",
            "previous_response_id": first.id,
            "stream": True,
            "input": [decision(first.output[1].id)],
        },
    )
    events = valid_events(raw.text)
    assert events[0]["sequence_number"] == 0
    second = valid(events[-1]["response"])
    assert second.previous_response_id == first.id
    assert [i.type for i in second.output] == ["mcp_call", "message"]
    assert second.output[0].output == "5" and second.output_text == "42 and 5."  # type: ignore[union-attr]
    # Each stays as it was answered.
    assert dump(await oai.responses.retrieve(waiting.id)) == dump(waiting)
    assert dump(await oai.responses.retrieve(first.id)) == dump(first)
    assert dump(await oai.responses.retrieve(second.id)) == dump(second)
    ids = {i.id for r in (waiting, first, second) for i in r.output}
    assert len(ids) == 5  # no item id twice


async def test_a_chain_goes_on_from_the_new_response(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    done = await approve(oai, waiting)
    # The chain's next turn names the new response; it runs in the same session (the model
    # calls again: the scripted replies cycle), and waits.
    raw = await client.post(
        "/v1/responses",
        json={"model": "careful", "input": "Again?", "previous_response_id": done.id},
    )
    assert raw.status_code == 200, raw.text
    nxt = valid(raw.json())
    assert nxt.previous_response_id == done.id and nxt.id not in (waiting.id, done.id)
    assert [i.type for i in nxt.output] == ["mcp_approval_request"]
    runs = await client.get(f"/v1/sessions/{raw.headers['X-Session-Id']}/runs")
    assert runs.status_code == 200, runs.text
    assert {r["id"] for r in runs.json()["data"]} == {waiting.id, nxt.id}  # one session
    last = await oai.responses.create(
        model="careful",
        input=[decision(nxt.output[0].id)],  # type: ignore[list-item]
        previous_response_id=nxt.id,
    )
    assert last.previous_response_id == nxt.id and last.output_text == "The answer is 42."
    # The waiting response was answered: new input from it forks the chain at its pause
    # (tests/app/test_responses_approval_gaps.py), as from any earlier response of a chain.
    forked = await oai.responses.with_raw_response.create(
        model="careful", input="From the pause?", previous_response_id=waiting.id
    )
    assert forked.headers["X-Session-Id"] != raw.headers["X-Session-Id"]
    assert forked.parse().previous_response_id == waiting.id


async def test_another_tenant_does_not_find_the_new_response(
    oai: openai.AsyncOpenAI,
    client: httpx.AsyncClient,
    app: FastAPI,  # noqa: F811 (the fixture)
) -> None:
    waiting = await paused(oai, client)
    done = await approve(oai, waiting)
    other = client_for(app, KEY_B)
    try:
        for call in (
            other.responses.retrieve(done.id),
            other.responses.cancel(done.id),
            other.responses.delete(done.id),
            other.responses.input_items.list(done.id),
            other.responses.create(model="poet", input="Hi", previous_response_id=done.id),
        ):
            with pytest.raises(openai.NotFoundError) as missing:
                await call
            assert missing.value.code == "response_not_found"
            assert done.id in missing.value.message
    finally:
        await other.close()
    assert (await oai.responses.retrieve(done.id)).id == done.id


async def test_background_answer_cancel_and_delete(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    started = await approve(oai, waiting, background=True)
    valid(dump(started))
    assert started.id != waiting.id and started.background
    assert started.status in ("queued", "in_progress") and started.output == []
    for _ in range(200):
        polled = await oai.responses.retrieve(started.id)
        if polled.status == "completed":
            break
        await asyncio.sleep(0.05)
    assert polled.status == "completed" and polled.output_text == "The answer is 42."
    # The waiting response ended at its pause: not cancellable (nor is its finished answer).
    for response_id in (waiting.id, started.id):
        with pytest.raises(openai.BadRequestError) as ended:
            await oai.responses.cancel(response_id)
        assert ended.value.code == "response_not_cancellable"
    # Deleting one leaves the other; the run goes with the last of them.
    deleted = await client.delete(f"/v1/responses/{waiting.id}")
    assert deleted.json() == {"id": waiting.id, "object": "response.deleted", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(waiting.id)
    assert (await oai.responses.retrieve(started.id)).output_text == "The answer is 42."
    assert (await client.get(f"/v1/runs/{waiting.id}")).status_code == 200
    await oai.responses.delete(started.id)
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(started.id)
    assert (await client.get(f"/v1/runs/{waiting.id}")).status_code == 404


async def test_cancel_a_new_response_while_it_runs_on(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    """Cancel acts on the run while the new response is its latest: a run paused again is
    cancelled through it."""
    waiting = await paused(oai, client, "twice", "twice")
    # OpenAI cancels background responses only.
    started = await approve(oai, waiting, "twice", background=True)
    for _ in range(200):
        first = await oai.responses.retrieve(started.id)
        if first.status == "completed":
            break
        await asyncio.sleep(0.05)
    assert first.output[-1].type == "mcp_approval_request"
    with pytest.raises(openai.BadRequestError):  # the earlier one ended at its pause
        await oai.responses.cancel(waiting.id)
    cancelled = await oai.responses.cancel(first.id)
    assert cancelled.id == first.id
    run = (await client.get(f"/v1/runs/{waiting.id}")).json()
    assert run["status"] == "cancelled"


@pytest.fixture
async def two_replicas() -> AsyncIterator[tuple[openai.AsyncOpenAI, openai.AsyncOpenAI]]:
    """Two apps (replicas) on one fresh PostgreSQL database, an openai client for each."""
    url = await _fresh_pg_database()
    await asyncio.to_thread(upgrade, url)
    models = json.dumps([*MODELS, CALC, SLOW])
    one, two = (create_app(make_settings(url, models=models)) for _ in range(2))
    try:
        async with LifespanManager(one), LifespanManager(two):
            clients = client_for(one, KEY_A), client_for(two, KEY_A)
            try:
                yield clients
            finally:
                for c in clients:
                    await c.close()
    finally:
        await _drop_pg_database(url)


@pytest.mark.postgres
async def test_another_replica_streams_the_new_response_live(
    two_replicas: tuple[openai.AsyncOpenAI, openai.AsyncOpenAI],
) -> None:
    """Answered on one replica, the new response is found, streamed live (from the stored
    log: not this replica's run) and resumed with ``starting_after`` on another."""
    one, two = two_replicas
    spec = {**CALCULATOR_AGENT, "model": "slowcalc", "approval": APPROVAL}
    await one.post("/agents", cast_to=httpx.Response, body={"name": "careful", "spec": spec})
    waiting = await waiting_response(one)
    started = await approve(one, waiting, background=True)
    live = [e async for e in await two.responses.retrieve(started.id, stream=True)]
    assert [e.sequence_number for e in live] == list(range(len(live)))
    assert live[0].type == "response.created" and live[-1].type == "response.completed"
    done = live[-1].response  # type: ignore[union-attr]
    assert done.id == started.id and done.previous_response_id == waiting.id
    assert [i.type for i in done.output] == ["mcp_call", "message"]
    tail = [
        e async for e in await two.responses.retrieve(started.id, stream=True, starting_after=2)
    ]
    assert [e.sequence_number for e in tail] == list(range(3, len(live)))
    assert dump(await two.responses.retrieve(waiting.id)) == dump(waiting)


async def test_an_approval_in_a_conversation_answers_by_the_conversation(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    """A response waiting in a conversation is answered with ``conversation`` (what a client
    in conversation mode sends): the new response is in the conversation too."""
    await approval_agent(client, "careful")
    conversation = await oai.conversations.create()
    waiting = await oai.responses.create(
        model="careful", input="6 times 7?", conversation=conversation.id
    )
    assert [i.type for i in waiting.output] == ["mcp_approval_request"]
    answer = decision(waiting.output[0].id)
    with pytest.raises(openai.BadRequestError) as both:
        await oai.responses.create(
            model="careful",
            input=[answer],  # type: ignore[list-item]
            conversation=conversation.id,
            previous_response_id=waiting.id,
        )
    assert both.value.code == "not_supported"
    done = await oai.responses.create(
        model="careful",
        input=[answer],  # type: ignore[list-item]
        conversation=conversation.id,
    )
    valid(dump(done))
    assert done.id != waiting.id and done.previous_response_id is None
    assert done.conversation is not None and done.conversation.id == conversation.id
    assert [i.type for i in done.output] == ["mcp_call", "message"]
    with pytest.raises(openai.ConflictError) as again:  # nothing waits in it any more
        await oai.responses.create(
            model="careful",
            input=[answer],  # type: ignore[list-item]
            conversation=conversation.id,
        )
    assert again.value.code == "run_not_waiting"


# -- the mapper on a log built by hand ----------------------------------------------------------
RID = "resp_00112233445566778899aabbccddeeff"
CONT = "resp_0011223344556677ffeeddccbbaa9988"
MCP = {"mcp": {"tools": [{"name": "add", "input_schema": {"type": "object"}}], "error": None}}


def _run(status: str, prompt: int, completion: int) -> dict[str, Any]:
    return {
        "status": status,
        "stop_reason": "requires_action" if status == "requires_action" else "end",
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion},
        "finished_at": "2026-11-27T08:00:00Z",
    }


def _mcp_call(index: int, a: int) -> tuple[str, dict[str, Any]]:
    call = {"action": {"name": "mcp.add", "parameters": {"a": a, "b": 1}}, "status": 1}
    return ("message", {"index": index, "message": {"sender": "bot", "content": "",
                                                    "formatted": call}})  # fmt: skip


def _result(index: int, text: str) -> tuple[str, dict[str, Any]]:
    result = {"result": [{"type": "text", "content": text}], "state": 0, "errmsg": None}
    return ("message", {"index": index, "message": {"sender": "executor", "content": text,
                                                    "formatted": result}})  # fmt: skip


def _pause(call_id: str, a: int, prompt: int, completion: int) -> tuple[str, dict[str, Any]]:
    calls = [{"id": call_id, "name": "mcp.add", "arguments": {"a": a, "b": 1}}]
    return ("run.requires_action", {"run": _run("requires_action", prompt, completion),
                                    "tool_calls": calls})  # fmt: skip


# A run that pauses twice before MCP calls, a gap in its last part, then answers.
LOG = [
    ("run.created", {"run": {"status": "running"}}),
    _mcp_call(0, 1),
    _pause("call_1", 1, 10, 4),
    ("run.created", {"run": {"status": "queued"}}),  # (what a resumed log may repeat: nothing)
    _result(1, "2"),
    _mcp_call(2, 2),
    _pause("call_2", 2, 25, 9),
    _result(3, "3"),
    ("run.gap", {"from_id": 9, "to_id": 11}),
    ("message", {"index": 4, "message": {"sender": "bot", "content": "Done: 3."}}),
    ("run.completed", {"run": _run("completed", 40, 15)}),
]


def _segment(segment: int, rid: str) -> tuple[ResponseStream, list[dict[str, Any]]]:
    base = base_of(rid, 1_800_000_000, {"model": "m"}, "bot")
    mapper = ResponseStream(base, "bot", True, mcp=MCP, segment=segment)
    events = [event for type_, data in LOG for event in mapper.feed(type_, data)]
    for event in events:
        EVENTS.validate_python(event)
    valid(mapper.response)
    return mapper, events


def test_each_segment_of_a_run_is_a_response_of_its_own() -> None:
    first, events = _segment(0, RID)
    assert first.ended and first.paused
    assert [i["type"] for i in first.response["output"]] == [
        "mcp_list_tools",
        "mcp_approval_request",
    ]
    assert events[-1]["type"] == "response.completed"
    assert first.response["usage"]["output_tokens"] == 4

    second, events = _segment(1, CONT)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    # The server was listed by the first response: its call and the next request only.
    assert [i["type"] for i in second.response["output"]] == ["mcp_call", "mcp_approval_request"]
    call = second.response["output"][0]
    assert call["output"] == "2" and call["id"] == f"mcp_{CONT[5:]}_0"
    assert second.response["output"][1]["id"] == "call_2"
    assert second.response["usage"]["input_tokens"] == 15  # 25 - 10
    assert second.response["usage"]["output_tokens"] == 5

    third, events = _segment(2, CONT)
    assert [i["type"] for i in third.response["output"]] == ["mcp_call", "message"]
    assert third.response["status"] == "completed" and third.response["usage"]["total_tokens"] == 21
    numbers = [e["sequence_number"] for e in events]
    assert numbers[0] == 0 and numbers == sorted(set(numbers))
    assert numbers[-1] > 11 * GAP_STRIDE  # after the gap: past anything sent and lost


def test_a_segment_not_reached_yet_is_the_bare_response() -> None:
    base = base_of(CONT, 1_800_000_000, {"model": "m"}, "bot")
    mapper = ResponseStream(base, "bot", True, mcp=MCP, segment=1)
    assert [e for type_, data in LOG[:3] for e in mapper.feed(type_, data)] == []
    assert not mapper.ended and mapper.response["output"] == []
    assert mapper.response["status"] == "in_progress" and mapper.response["usage"] is None


def test_a_denied_call_has_no_item_an_approved_one_names_its_request() -> None:
    base = base_of(CONT, 1_800_000_000, {"model": "m"}, "bot")
    denied = ResponseStream(base, "bot", True, mcp=MCP, segment=1, decided={"call_1": False})
    events = [event for type_, data in LOG for event in denied.feed(type_, data)]
    for event in events:
        EVENTS.validate_python(event)
    assert [i["type"] for i in valid(denied.response).model_dump()["output"]] == [
        "mcp_approval_request"  # the first call was denied: only the next pause's request
    ]
    approved, _ = _segment(2, CONT)
    call = approved.response["output"][0]
    assert call["type"] == "mcp_call" and call["approval_request_id"] == "call_2"


def test_a_failed_call_has_the_openai_error_shape() -> None:
    failed = {"result": [], "state": -1, "errmsg": "division by zero"}
    log = [
        ("run.created", {"run": {"status": "running"}}),
        _mcp_call(0, 1),
        ("message", {"index": 1, "message": {"sender": "x", "content": "", "formatted": failed}}),
        ("run.completed", {"run": _run("completed", 5, 2)}),
    ]
    mapper = ResponseStream(base_of(RID, 1_800_000_000, {"model": "m"}, "bot"), "bot", True)
    for type_, data in log:
        for event in mapper.feed(type_, data):
            EVENTS.validate_python(event)
    call = valid(mapper.response).output[-1]
    assert call.type == "mcp_call" and call.status == "failed" and call.output is None
    assert call.error is not None and call.error.type == "mcp_tool_execution_error"
    assert call.error.content == [{"type": "text", "text": "division by zero"}]
