"""Approvals answered another way than an ``mcp_approval_response``, ``store: false`` answers,
and new input from an answered response (SQLite and PostgreSQL; docs/responses.md, "Agents:
server-side tools and approvals"). Through the official ``openai`` client; every body and
event validated against its models.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import openai
import pytest

from tests.app.approval_helpers import (
    CALCULATOR_AGENT,
    app,  # noqa: F401 (the fixture: the calculator models)
    approve,
    decision,
    dump,
    paused,
    session_memory,
    until_ended,
)
from tests.app.test_responses import valid, valid_events


def _without_metadata(response: Any) -> dict[str, Any]:
    return {k: v for k, v in dump(response).items() if k != "metadata"}


async def test_a_run_resumed_through_the_runs_api_is_a_new_response(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    [request] = waiting.output
    resumed = await client.post(
        f"/v1/runs/{waiting.id}/resume",
        json={"decisions": [{"id": request.id, "action": "approve"}]},
    )
    assert resumed.status_code == 202, resumed.text
    assert (await until_ended(client, waiting.id))["status"] == "completed"

    # The waiting response, retrieved, names the run's next response; it is otherwise as it was.
    again = await oai.responses.retrieve(waiting.id)
    assert again.metadata is not None
    next_id = again.metadata["next_response_id"]
    assert _without_metadata(again) == _without_metadata(waiting)
    done = await oai.responses.retrieve(next_id)
    valid(dump(done))
    assert done.id != waiting.id and done.id[5:21] == waiting.id[5:21]  # the chain's route key
    assert done.previous_response_id == waiting.id and done.status == "completed"
    assert done.background and done.metadata == {}  # nobody waited on it
    call, answer = done.output
    assert call.type == "mcp_call" and call.output == "42"
    assert call.approval_request_id == request.id
    assert answer.type == "message" and done.output_text == "The answer is 42."
    [item] = (await oai.responses.input_items.list(done.id)).data
    assert item.type == "mcp_approval_response" and item.approve is True
    assert item.approval_request_id == request.id
    replay = await client.get(f"/v1/responses/{done.id}?stream=true")
    events = valid_events(replay.text)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert dump(valid(events[-1]["response"])) == dump(done)

    # Answering the waiting response now is a 409 naming the response its run went on as.
    with pytest.raises(openai.ConflictError) as answered:
        await oai.responses.create(
            model="careful",
            input=[decision(request.id)],  # type: ignore[list-item]
            previous_response_id=waiting.id,
        )
    assert answered.value.code == "run_not_waiting" and next_id in answered.value.message
    # The chain goes on from the new response, in the run's session.
    nxt = await oai.responses.create(model="careful", input="Again?", previous_response_id=next_id)
    assert nxt.previous_response_id == next_id
    assert [i.type for i in nxt.output] == ["mcp_approval_request"]


async def test_an_approval_timeout_is_a_new_response_that_denied(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    approval = {"tools": ["Calculator"], "timeout_s": 1}
    spec = {**CALCULATOR_AGENT, "approval": approval}
    made = await client.post("/v1/agents", json={"name": "hasty", "spec": spec})
    assert made.status_code == 201, made.text
    conversation = await oai.conversations.create()
    waiting = await oai.responses.create(
        model="hasty", input="6 times 7?", conversation=conversation.id
    )
    [request] = waiting.output
    assert request.type == "mcp_approval_request"
    assert (await until_ended(client, waiting.id))["status"] == "completed"
    again = await oai.responses.retrieve(waiting.id)
    assert again.metadata is not None
    done = await oai.responses.retrieve(again.metadata["next_response_id"])
    valid(dump(done))
    # In the conversation: the new response is its latest (no previous_response_id).
    assert done.conversation is not None and done.conversation.id == conversation.id
    assert done.previous_response_id is None
    [answer] = done.output  # denied: no call ran
    assert answer.type == "message" and done.output_text == "The answer is 42."
    [item] = (await oai.responses.input_items.list(done.id)).data
    assert item.type == "mcp_approval_response" and item.approve is False
    assert item.approval_request_id == request.id
    # The conversation goes on from it.
    nxt = await oai.responses.create(model="hasty", input="Again?", conversation=conversation.id)
    assert [i.type for i in nxt.output] == ["mcp_approval_request"]


async def test_a_store_false_answer_is_not_kept_and_its_run_goes_on(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    with pytest.raises(openai.BadRequestError) as background:
        await approve(oai, waiting, store=False, background=True)
    assert background.value.code == "not_supported"
    done = await approve(oai, waiting, store=False)
    valid(dump(done))
    assert done.output_text == "The answer is 42." and done.previous_response_id == waiting.id
    for call in (
        oai.responses.retrieve(done.id),
        oai.responses.input_items.list(done.id),
        oai.responses.delete(done.id),
        oai.responses.create(model="careful", input="Hi", previous_response_id=done.id),
    ):
        with pytest.raises(openai.NotFoundError) as missing:
            await call
        assert missing.value.code == "response_not_found"
    # The run went on and is kept (as the waiting response is); the pause stays answered.
    assert (await client.get(f"/v1/runs/{waiting.id}")).json()["status"] == "completed"
    assert dump(await oai.responses.retrieve(waiting.id)) == dump(waiting)
    with pytest.raises(openai.ConflictError):
        await approve(oai, waiting)
    # Deleting the waiting response, the last one kept, takes the run with it.
    await oai.responses.delete(waiting.id)
    assert (await client.get(f"/v1/runs/{waiting.id}")).status_code == 404


async def test_a_store_false_answer_streamed_or_paused_again(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client, "twice", "twice")
    raw = await client.post(
        "/v1/responses",
        json={
            "model": "twice",
            "previous_response_id": waiting.id,
            "stream": True,
            "store": False,
            "input": [decision(waiting.output[0].id)],
        },
    )
    events = valid_events(raw.text)
    first = valid(events[-1]["response"])
    assert [i.type for i in first.output] == ["mcp_call", "mcp_approval_request"]
    for _ in range(200):  # forgotten once its part of the run has ended
        gone = await client.get(f"/v1/responses/{first.id}")
        if gone.status_code == 404:
            break
        await asyncio.sleep(0.02)
    assert gone.status_code == 404
    # Its approval requests are still answered by its id (the run waits on them).
    second = await oai.responses.create(
        model="twice",
        input=[decision(first.output[1].id)],  # type: ignore[list-item]
        previous_response_id=first.id,
    )
    valid(dump(second))
    assert second.previous_response_id == first.id and second.output_text == "42 and 5."
    assert (await oai.responses.retrieve(second.id)).id == second.id


async def test_new_input_from_an_answered_response_forks_at_its_pause(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    done = await approve(oai, waiting)
    raw = await client.post(
        "/v1/responses",
        json={"model": "careful", "input": "From the pause?", "previous_response_id": waiting.id},
    )
    assert raw.status_code == 200, raw.text
    fork = valid(raw.json())
    assert fork.previous_response_id == waiting.id and fork.id not in (waiting.id, done.id)
    original = (await client.get(f"/v1/runs/{waiting.id}")).json()["session_id"]
    forked = raw.headers["X-Session-Id"]
    assert forked != original
    # The fork's memory: the chain up to the pause (the question, the call asked for), then
    # its own turn; not what the run did after the pause.
    memory = await session_memory(client, forked)
    assert [m["content"] for m in memory[:3:2]] == ["6 times 7?", "From the pause?"]
    assert "Calculator" in str(memory[1]["content"])  # the call it asked for, not run
    senders = [m["sender"] for m in await session_memory(client, original)]
    assert "AsyncActionExecutor" in senders  # the original ran it after the pause
    assert "AsyncActionExecutor" not in [m["sender"] for m in memory]
    # The original chain is untouched: it goes on from the answer.
    nxt = await oai.responses.create(model="careful", input="Again?", previous_response_id=done.id)
    assert nxt.previous_response_id == done.id


async def test_only_a_background_response_is_cancelled(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    """OpenAI cancels responses created with ``background: true`` only: a streamed one, while
    it runs, is refused (400) and goes on to its end."""
    async with client.stream(
        "POST", "/v1/responses", json={"model": "slow", "input": "go", "stream": True}
    ) as raw:
        lines = raw.aiter_lines()
        response_id = None
        async for line in lines:
            if line.startswith("data:") and '"response.created"' in line:
                response_id = line.split('"id":"', 1)[1].split('"', 1)[0]
                break
        assert response_id is not None
        with pytest.raises(openai.BadRequestError) as refused:
            await oai.responses.cancel(response_id)
        assert refused.value.code == "response_not_cancellable"
        assert refused.value.body["message"] == "Cannot cancel a synchronous response."  # type: ignore[index]
        rest = "\n".join([line async for line in lines])
    assert "response.completed" in rest
    assert (await oai.responses.retrieve(response_id)).status == "completed"


async def test_an_answer_and_a_run_resume_at_once_make_one_response(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    """Of an ``mcp_approval_response`` and ``POST /v1/runs/{id}/resume`` at the same moment,
    one goes on and the other is a 409; either way the run's next response exists."""
    waiting = await paused(oai, client)
    request_id = waiting.output[0].id

    async def answer() -> int:
        try:
            await approve(oai, waiting)
        except openai.ConflictError as exc:
            assert exc.code == "run_not_waiting"
            return 409
        return 200

    async def resume() -> int:
        body = {"decisions": [{"id": request_id, "action": "approve"}]}
        return (await client.post(f"/v1/runs/{waiting.id}/resume", json=body)).status_code

    codes = sorted(await asyncio.gather(answer(), resume()))
    assert codes in ([200, 409], [202, 409]), codes
    assert (await until_ended(client, waiting.id))["status"] == "completed"
    with pytest.raises(openai.ConflictError) as answered:  # names the one that went on
        await approve(oai, waiting)
    next_id = answered.value.message.split("went on as response '")[1].split("'")[0]
    done = await oai.responses.retrieve(next_id)
    assert done.previous_response_id == waiting.id and done.output_text == "The answer is 42."


async def test_a_second_pause_resumed_through_the_runs_api_follows_the_first_answer(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client, "twice", "twice")
    first = await approve(oai, waiting, "twice")
    request = first.output[-1]
    assert request.type == "mcp_approval_request"
    resumed = await client.post(
        f"/v1/runs/{waiting.id}/resume",
        json={"decisions": [{"id": request.id, "action": "deny", "message": "enough"}]},
    )
    assert resumed.status_code == 202, resumed.text
    assert (await until_ended(client, waiting.id))["status"] == "completed"
    assert dump(await oai.responses.retrieve(waiting.id)) == dump(waiting)  # answered here
    again = await oai.responses.retrieve(first.id)
    assert again.metadata is not None and _without_metadata(again) == _without_metadata(first)
    second = await oai.responses.retrieve(again.metadata["next_response_id"])
    valid(dump(second))
    assert second.previous_response_id == first.id
    assert [i.type for i in second.output] == ["message"]  # the denied call did not run
    [item] = (await oai.responses.input_items.list(second.id)).data
    assert item.type == "mcp_approval_response" and item.approve is False
    assert item.reason == "enough"


async def test_an_edited_call_shows_the_arguments_it_ran_with(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    waiting = await paused(oai, client)
    [request] = waiting.output
    edit = {"id": request.id, "action": "edit", "arguments": {"expression": "2 * 3"}}
    resumed = await client.post(f"/v1/runs/{waiting.id}/resume", json={"decisions": [edit]})
    assert resumed.status_code == 202, resumed.text
    assert (await until_ended(client, waiting.id))["status"] == "completed"
    again = await oai.responses.retrieve(waiting.id)
    assert again.metadata is not None
    done = await oai.responses.retrieve(again.metadata["next_response_id"])
    call = done.output[0]
    assert call.type == "mcp_call" and call.approval_request_id == request.id
    assert json.loads(call.arguments) == {"expression": "2 * 3"} and call.output == "6"
    [item] = (await oai.responses.input_items.list(done.id)).data
    assert item.type == "mcp_approval_response" and item.approve is True  # an edit approves
