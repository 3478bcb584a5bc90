"""The Responses API's client-side function tools, answer limits and background runs, through
the official ``openai`` client (SQLite and PostgreSQL)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import openai
import pytest
import sqlalchemy as sa
from fastapi import FastAPI

from app.db.models import Session
from app.main import create_app
from app.settings import Settings
from tests.app.conftest import MODELS
from tests.app.test_responses import client_for, valid, valid_events
from tests.lifespan import LifespanManager

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
    "strict": True,
}
CALL = {"name": "get_weather", "arguments": '{"city": "Paris"}'}
TOOL_MODELS = [
    *MODELS,
    {"name": "caller", "backend": "scripted", "replies": [
        {"content": "", "tool_calls": [CALL]}, "It is sunny in Paris.",
    ]},
    {"name": "twice", "backend": "scripted", "replies": [
        {"content": "", "tool_calls": [CALL, {**CALL, "arguments": '{"city": "Rome"}'}]},
    ]},
]  # fmt: skip


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    application = create_app(settings_factory(models=json.dumps(TOOL_MODELS)))
    async with LifespanManager(application):
        yield application


@pytest.fixture
async def oai(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    client = client_for(app)
    yield client
    await client.close()


def recent(app: FastAPI, model: str) -> list[dict[str, Any]]:
    handle = app.state.agentstation.models.get(model)
    return list(getattr(handle.llm, "inner", handle.llm).recent)


async def test_function_call_then_its_output_continues_the_chain(
    oai: openai.AsyncOpenAI, app: FastAPI
) -> None:
    first = await oai.responses.create(model="caller", input="Weather?", tools=[WEATHER])
    valid(first.model_dump(mode="json"))
    assert first.status == "completed"
    [call] = first.output
    assert call.type == "function_call" and call.name == "get_weather"
    assert json.loads(call.arguments) == {"city": "Paris"} and call.call_id
    params = recent(app, "caller")[-1]["params"]
    assert params["tools"][0]["function"]["name"] == "get_weather"
    second = await oai.responses.create(
        model="caller",
        previous_response_id=first.id,
        tools=[WEATHER],
        input=[{"type": "function_call_output", "call_id": call.call_id, "output": "sunny"}],
    )
    assert second.output_text == "It is sunny in Paris."
    messages = recent(app, "caller")[-1]["messages"]
    assert messages[-2]["tool_calls"][0]["id"] == call.call_id
    assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}


async def test_streamed_function_call_events(oai: openai.AsyncOpenAI) -> None:
    events = []
    stream = await oai.responses.create(
        model="caller", input="Weather?", tools=[WEATHER], stream=True
    )
    async for event in stream:
        events.append(event)
    types = [e.type for e in events]
    assert types == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert events[4].arguments == '{"city": "Paris"}'  # type: ignore[union-attr]


async def test_parallel_calls_and_tool_choice(oai: openai.AsyncOpenAI, app: FastAPI) -> None:
    both = await oai.responses.create(model="twice", input="Two cities", tools=[WEATHER])
    assert [item.type for item in both.output] == ["function_call", "function_call"]
    one = await oai.responses.create(
        model="twice", input="Two cities", tools=[WEATHER], parallel_tool_calls=False
    )
    assert [item.type for item in one.output] == ["function_call"]
    named = await oai.responses.create(
        model="twice",
        input="x",
        tools=[WEATHER],
        tool_choice={"type": "function", "name": "get_weather"},
    )
    assert named.tool_choice.name == "get_weather"  # type: ignore[union-attr]
    assert recent(app, "twice")[-1]["params"]["tool_choice"] == {
        "type": "function",
        "function": {"name": "get_weather"},
    }
    none = await oai.responses.create(model="twice", input="x", tools=[WEATHER], tool_choice="none")
    assert not [item for item in none.output if item.type == "function_call"]
    with pytest.raises(openai.BadRequestError) as bad:
        await oai.responses.create(
            model="twice", input="x", tools=[WEATHER],
            tool_choice={"type": "function", "name": "nope"},
        )  # fmt: skip
    assert bad.value.body["param"] == "tool_choice"  # type: ignore[index]


async def test_max_output_tokens_makes_it_incomplete(oai: openai.AsyncOpenAI) -> None:
    response = await oai.responses.create(
        model="echo", input="one two three four five", max_output_tokens=2
    )
    assert response.status == "incomplete"
    assert response.incomplete_details is not None
    assert response.incomplete_details.reason == "max_output_tokens"
    assert response.output_text == "one two "


async def test_background_polls_and_cancels(oai: openai.AsyncOpenAI) -> None:
    started = await oai.responses.create(model="slow", input="go", background=True)
    assert started.status in ("queued", "in_progress") and started.background
    for _ in range(200):
        polled = await oai.responses.retrieve(started.id)
        if polled.status == "completed":
            break
        await asyncio.sleep(0.05)
    assert polled.output_text == "one two three four five six seven eight nine ten"
    # Cancel one while it runs: it ends cancelled; a second cancel is refused.
    running = await oai.responses.create(model="slow", input="go", background=True)
    await asyncio.sleep(0.3)
    cancelled = await oai.responses.cancel(running.id)
    assert cancelled.status == "cancelled"
    assert (await oai.responses.retrieve(running.id)).status == "cancelled"
    with pytest.raises(openai.BadRequestError) as again:
        await oai.responses.cancel(running.id)
    assert again.value.code == "response_not_cancellable"
    # Its stream, read afterwards, ends with one terminal event.
    events = [e async for e in await oai.responses.retrieve(running.id, stream=True)]
    assert events[-1].type == "response.failed"
    assert events[-1].response.status == "cancelled"  # type: ignore[union-attr]


async def test_a_background_response_that_waits_streams_response_queued(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    """A chain's next response waits for the one before: OpenAI's order for a queued
    response, ``response.created`` and ``response.queued`` (status ``queued``), then
    ``response.in_progress`` when it starts, then its output."""
    first = await oai.responses.create(model="slow", input="go", background=True)
    waiting = await oai.responses.create(
        model="slow", input="again", background=True, previous_response_id=first.id
    )
    assert waiting.status == "queued"
    raw = await client.get(f"/v1/responses/{waiting.id}", params={"stream": "true"})
    events = valid_events(raw.text)
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.queued",
        "response.in_progress",
        "response.output_item.added",
    ]
    assert [e["response"]["status"] for e in events[:3]] == [
        "queued",
        "queued",
        "in_progress",
    ]
    assert types[-1] == "response.completed"
    assert (await oai.responses.retrieve(first.id)).status == "completed"  # it ran first


async def test_background_stream_resumes_mid_way(oai: openai.AsyncOpenAI) -> None:
    stream = await oai.responses.create(model="slow", input="go", background=True, stream=True)
    seen = []
    async for event in stream:
        seen.append(event)
        if event.type == "response.output_text.delta" and len(seen) > 4:
            break  # the client drops the stream; a background run goes on
    await stream.close()
    rid = seen[0].response.id  # type: ignore[union-attr]
    after = seen[-1].sequence_number
    rest = [e async for e in await oai.responses.retrieve(rid, stream=True, starting_after=after)]
    assert rest[0].sequence_number == after + 1
    assert rest[-1].type == "response.completed"
    text = "".join(
        e.delta  # type: ignore[union-attr]
        for e in [*seen, *rest]
        if e.type == "response.output_text.delta"
    )
    assert text == "one two three four five six seven eight nine ten"


async def test_a_codex_shaped_exchange_runs_in_no_session(
    oai: openai.AsyncOpenAI, app: FastAPI
) -> None:
    """store: false, the whole history each time, developer messages, tools of types this
    server does not host: the raw model answers in the request; nothing is stored."""
    sessions_before = await _count_sessions(app)
    history: list[Any] = [
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "You are Codex."}]},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "hi"}]},
    ]  # fmt: skip
    tools: Any = [
        WEATHER,
        {"type": "namespace", "name": "multi_agent_v1", "tools": []},
        {"type": "web_search", "external_web_access": False},
    ]
    common: Any = {
        "model": "caller", "tools": tools, "tool_choice": "auto", "parallel_tool_calls": True,
        "reasoning": {"summary": "auto"}, "store": False,
        "include": ["reasoning.encrypted_content"], "prompt_cache_key": "k",
        "extra_body": {"client_metadata": {"x": "y"}},
    }  # fmt: skip
    events = [e async for e in await oai.responses.create(input=history, stream=True, **common)]
    assert events[-1].type == "response.completed"
    call = events[-1].response.output[0]  # type: ignore[union-attr]
    assert call.type == "function_call" and call.name == "get_weather"
    history += [
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "sunny"},
    ]  # fmt: skip
    answer = await oai.responses.create(input=history, **common)
    assert answer.output_text == "It is sunny in Paris."
    messages = recent(app, "caller")[-1]["messages"]
    assert messages[0] == {"role": "system", "content": "You are Codex."}
    assert messages[-1] == {"role": "tool", "tool_call_id": call.call_id, "content": "sunny"}
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(answer.id)
    assert await _count_sessions(app) == sessions_before


async def _count_sessions(app: FastAPI) -> int:
    async with app.state.agentstation.sessionmaker() as db:
        return int(await db.scalar(sa.select(sa.func.count()).select_from(Session)) or 0)
