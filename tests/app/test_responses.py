"""The Responses API through the official ``openai`` client (SQLite and PostgreSQL): create,
stream, retrieve, retrieve-stream with ``starting_after``, chains, input items, errors. Every
body and every streamed event is validated against the ``openai`` package's own models."""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest
from fastapi import FastAPI
from openai import omit
from openai.lib.streaming.responses._responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.app.conftest import KEY_A, KEY_B, client_for, make_agent, parse_sse

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)


def valid(body: dict[str, Any]) -> Response:
    """The body as the openai package's ``Response`` (strict validation, not ``construct``)."""
    return Response.model_validate(body)


def valid_events(text: str) -> list[dict[str, Any]]:
    """An SSE body's events, each validated; ``event:`` names the type; numbers increase; a
    whole stream (from ``response.created``) also passes the ``openai`` package's own
    stream accumulator (``ResponseStreamState``: its order and identity rules)."""
    events, parsed = [], []
    for frame in parse_sse(text):
        data = frame["data"]
        parsed.append(EVENTS.validate_python(data))
        assert frame["event"] == data["type"]
        events.append(data)
    numbers = [e["sequence_number"] for e in events]
    assert numbers == sorted(set(numbers)), numbers
    if events and events[0]["type"] == "response.created":
        state: ResponseStreamState[Any] = ResponseStreamState(input_tools=omit, text_format=omit)
        for event in parsed:
            state.handle_event(event)
    return events


async def test_create_answers_with_a_valid_response(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    raw = await client.post("/v1/responses", json={"model": "poet", "input": "Write a poem"})
    assert raw.status_code == 200, raw.text
    response = valid(raw.json())
    assert response.status == "completed"
    assert response.output_text == "Roses are red."
    assert response.id.startswith("resp_") and len(response.id) == 5 + 32
    assert response.usage is not None and response.usage.output_tokens == 3
    assert raw.headers["X-Session-Id"].startswith("chain_")
    again = await oai.responses.retrieve(response.id)
    assert again.output_text == "Roses are red." and again.status == "completed"
    # The answer (built from the run's end) is what the stored log replays.
    assert again.model_dump() == {**response.model_dump(), "created_at": again.created_at}


async def test_stream_events_in_openai_order(client: httpx.AsyncClient) -> None:
    raw = await client.post(
        "/v1/responses", json={"model": "echo", "input": "say these words", "stream": True}
    )
    assert raw.status_code == 200 and raw.headers["content-type"].startswith("text/event-stream")
    events = valid_events(raw.text)
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    assert deltas == "say these words"
    assert events[0]["sequence_number"] == 0
    assert raw.headers["X-Session-Id"].startswith("chain_")
    rid = events[0]["response"]["id"]
    # The same events again, after any number: the numbers are the ones first sent.
    replay = await client.get(f"/v1/responses/{rid}", params={"stream": "true"})
    assert valid_events(replay.text) == events
    tail = await client.get(f"/v1/responses/{rid}", params={"stream": "true", "starting_after": 4})
    assert valid_events(tail.text) == events[5:]


async def test_openai_client_stream_and_retrieve_stream(oai: openai.AsyncOpenAI) -> None:
    seen = []
    async with oai.responses.stream(model="echo", input="one two three") as stream:
        async for event in stream:
            seen.append(event.type)
        final = await stream.get_final_response()
    assert final.output_text == "one two three" and seen[-1] == "response.completed"
    resumed = await oai.responses.retrieve(final.id, stream=True, starting_after=3)
    numbers = [event.sequence_number async for event in resumed]
    assert numbers[0] == 4 and numbers[-1] == len(seen) - 1


async def test_chain_shares_the_session_and_fork_sees_only_its_prefix(
    oai: openai.AsyncOpenAI, app: FastAPI
) -> None:
    first = await oai.responses.create(model="echo", input="alpha")
    second = await oai.responses.create(model="echo", input="beta", previous_response_id=first.id)
    assert second.previous_response_id == first.id
    # The chain went on in one session; its runs are the responses.
    http = httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app),
        base_url="http://t",
        headers={"Authorization": f"Bearer {KEY_A}"},
    )
    raw = await http.post(
        "/v1/responses",
        json={"model": "echo", "input": "gamma", "previous_response_id": second.id},
    )
    chain = raw.headers["X-Session-Id"]
    memory = (await http.get(f"/v1/sessions/{chain}/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["alpha", "alpha", "beta", "beta", "gamma", "gamma"]
    # A second continuation of `first`: a fork that sees alpha only, not beta or gamma.
    fork = await http.post(
        "/v1/responses",
        json={"model": "echo", "input": "delta", "previous_response_id": first.id},
    )
    forked = fork.headers["X-Session-Id"]
    assert forked != chain
    memory = (await http.get(f"/v1/sessions/{forked}/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["alpha", "alpha", "delta", "delta"]
    # The original chain is untouched by the fork.
    memory = (await http.get(f"/v1/sessions/{chain}/memory")).json()["memory"]
    assert len(memory) == 6
    await http.aclose()


async def test_instructions_apply_to_one_response_only(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    handle = app.state.agentstation.models.get("echo")
    llm = getattr(handle.llm, "inner", handle.llm)
    first = await client.post(
        "/v1/responses", json={"model": "echo", "input": "one", "instructions": "Be terse."}
    )
    calls = llm.recent
    assert calls[-1]["messages"][0] == {"role": "system", "content": "Be terse."}
    await client.post(
        "/v1/responses",
        json={"model": "echo", "input": "two", "previous_response_id": first.json()["id"]},
    )
    assert all(m["role"] != "system" for m in llm.recent[-1]["messages"])
    assert [m["content"] for m in llm.recent[-1]["messages"]] == ["one", "one", "two"]


async def test_developer_messages_and_parts(app: FastAPI, client: httpx.AsyncClient) -> None:
    body = {
        "model": "echo",
        "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "Rules."}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
        ],
        "store": False,
        "reasoning": {"summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "abc",
        "client_metadata": {"x": 1},
        "tools": [{"type": "web_search", "external_web_access": False}],
    }
    raw = await client.post("/v1/responses", json=body)
    assert raw.status_code == 200, raw.text
    assert valid(raw.json()).output_text == "hi"
    handle = app.state.agentstation.models.get("echo")
    llm = getattr(handle.llm, "inner", handle.llm)
    assert llm.recent[-1]["messages"] == [
        {"role": "system", "content": "Rules."},
        {"role": "user", "content": "hi"},
    ]
    # store: false: nothing retrievable.
    gone = await client.get(f"/v1/responses/{raw.json()['id']}")
    assert gone.status_code == 404


async def test_image_and_file_inputs_are_refused_by_name(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    """The models served here read text: an image or a file in the input is a 400 naming the
    part (never silently dropped), in a response, a stateless one, and a conversation."""
    image = {"type": "input_image", "image_url": "data:image/png;base64,iVBORw0KGgo="}
    pdf = "data:application/pdf;base64,JVBERi0="
    document = {"type": "input_file", "filename": "a.pdf", "file_data": pdf}
    text = {"type": "input_text", "text": "What is this?"}
    for store in (True, False):
        with pytest.raises(openai.BadRequestError) as refused:
            await oai.responses.create(
                model="echo", store=store,
                input=[{"role": "user", "content": [text, image]}],  # type: ignore[list-item]
            )  # fmt: skip
        assert refused.value.code == "not_supported"
        assert refused.value.body["param"] == "input[0].content[1]"  # type: ignore[index]
        assert "input_image" in str(refused.value)
    output: Any = {"type": "function_call_output", "call_id": "c1", "output": [document]}
    call: Any = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    with pytest.raises(openai.BadRequestError) as file:
        await oai.responses.create(model="echo", input=[call, output])
    assert file.value.body["param"] == "input[1].output[0]"  # type: ignore[index]
    assert "input_file" in str(file.value)
    conversation = await client.post(
        "/v1/conversations", json={"items": [{"role": "user", "content": [image]}]}
    )
    assert conversation.status_code == 400
    assert conversation.json()["error"]["param"] == "items[0].content[0]"
    # Nothing was stored by the refused requests.
    assert (await client.get("/v1/sessions")).json()["data"] == []


async def test_stored_agent_as_model(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper", "poet")
    raw = await client.post("/v1/responses", json={"model": "helper", "input": "go"})
    response = valid(raw.json())
    assert response.model == "helper" and response.output_text == "Roses are red."
    session = raw.headers["X-Session-Id"]
    runs = (await client.get(f"/v1/sessions/{session}/runs")).json()["data"]
    assert [r["id"] for r in runs] == [response.id]


async def test_input_items_and_delete(oai: openai.AsyncOpenAI) -> None:
    response = await oai.responses.create(
        model="echo",
        input=[
            {"role": "user", "content": "first"},
            {"role": "assistant", "content": "ok"},
            {"role": "user", "content": "second"},
        ],
    )
    items = await oai.responses.input_items.list(response.id, order="asc")
    texts = [item.content[0].text for item in items.data]  # type: ignore[union-attr]
    assert texts == ["first", "ok", "second"]
    await oai.responses.delete(response.id)
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(response.id)


async def test_errors_in_openai_envelope(oai: openai.AsyncOpenAI, app: FastAPI) -> None:
    with pytest.raises(openai.NotFoundError) as unknown:
        await oai.responses.create(model="echo", input="x", previous_response_id="resp_missing")
    assert "resp_missing" in str(unknown.value)
    assert unknown.value.body["param"] == "previous_response_id"  # type: ignore[index]
    with pytest.raises(openai.NotFoundError) as model:
        await oai.responses.create(model="nope", input="x")
    assert model.value.code == "model_not_found"
    with pytest.raises(openai.BadRequestError) as role:
        await oai.responses.create(model="echo", input=[{"role": "robot", "content": "x"}])
    assert role.value.body["param"] == "input[0].role"  # type: ignore[index]
    done = await oai.responses.create(model="echo", input="x")
    with pytest.raises(openai.BadRequestError):
        await oai.responses.cancel(done.id)
    # Another tenant's response is unknown.
    other = client_for(app, KEY_B)
    with pytest.raises(openai.NotFoundError):
        await other.responses.retrieve(done.id)
    with pytest.raises(openai.NotFoundError):
        await other.responses.create(model="echo", input="x", previous_response_id=done.id)
    await other.close()


async def test_the_playground_lists_a_responses_session(client: httpx.AsyncClient) -> None:
    """The playground lists agents and their sessions: a raw model's chain is a session of the
    agent ``responses.<model>``, with the turns in its memory."""
    raw = await client.post("/v1/responses", json={"model": "echo", "input": "listed"})
    session = raw.headers["X-Session-Id"]
    agents = (await client.get("/v1/agents")).json()["data"]
    implicit = next(a for a in agents if a["name"] == "responses.echo")
    assert implicit["spec"]["kind"] == "model" and implicit["spec"]["model"] == "echo"
    listed = (await client.get("/v1/sessions", params={"agent": "responses.echo"})).json()
    assert session in [s["id"] for s in listed["data"]]
    memory = (await client.get(f"/v1/sessions/{session}/memory")).json()["memory"]
    assert [(m["sender"], m["content"]) for m in memory] == [
        ("user", "listed"),
        ("responses.echo", "listed"),
    ]
    # A message typed in the playground goes on with the same session.
    more = await client.post(f"/v1/sessions/{session}/messages", json={"message": "typed"})
    assert more.json()["message"]["content"] == "typed"


async def test_a_refused_response_leaves_no_session(
    client: httpx.AsyncClient, app: FastAPI
) -> None:
    """A new chain whose run is refused (here: the model is not ready) keeps no session."""
    app.state.agentstation.models.get("echo").ready = False
    try:
        before = (await client.get("/v1/sessions")).json()["data"]
        raw = await client.post("/v1/responses", json={"model": "echo", "input": "x"})
        assert raw.status_code == 503 and raw.json()["error"]["code"] == "model_not_ready"
        assert (await client.get("/v1/sessions")).json()["data"] == before
    finally:
        app.state.agentstation.models.get("echo").ready = True
