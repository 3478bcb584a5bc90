"""The OpenAI front door of approvals with the official ``openai`` client, against a live
server: pending calls come back as ``tool_calls``; ``tool`` messages on the same
``X-Session-Id`` decide about them and the run goes on."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from app.settings import Settings
from tests.app.conftest import KEY_A, MODELS
from tests.app.live import live_server
from tests.app.test_approvals import CALC, SPEC

pytestmark = pytest.mark.live


@pytest.fixture
def base_url(settings_factory: Callable[..., Settings]) -> Iterator[str]:
    with live_server(settings_factory(models=json.dumps([*MODELS, CALC]))) as url:
        yield url


@pytest.fixture
async def ai(base_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as http:
        resp = await http.post("/v1/agents", json={"name": "calc", "spec": SPEC})
        assert resp.status_code == 201, resp.text
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=f"{base_url}/v1", max_retries=0) as c:
        yield c


QUESTION: dict[str, Any] = {"role": "user", "content": "What is 6 * 7?"}


async def test_tool_calls_out_and_tool_messages_in(ai: openai.AsyncOpenAI) -> None:
    session = {"X-Session-Id": "chat-approve"}
    first = await ai.chat.completions.create(
        model="calc", messages=[QUESTION], extra_headers=session
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    calls = choice.message.tool_calls or []
    assert len(calls) == 1 and calls[0].type == "function"
    call = calls[0]
    assert call.function.name == "Calculator"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"expression": "6 * 7"}  # type: ignore[union-attr]

    # Busy while it waits: a new user message is refused (the agent's strategy: reject).
    with pytest.raises(openai.ConflictError):
        await ai.chat.completions.create(
            model="calc", messages=[{"role": "user", "content": "hello?"}], extra_headers=session
        )

    assistant = choice.message.model_dump(exclude_none=True)
    answer = await ai.chat.completions.create(
        model="calc",
        messages=[
            QUESTION,
            assistant,
            {"role": "tool", "tool_call_id": call.id, "content": "approve"},
        ],  # type: ignore[list-item]
        extra_headers=session,
    )
    assert answer.choices[0].finish_reason == "stop"
    assert answer.choices[0].message.content == "The answer is 42."
    # The same tool message again: nothing waits any more.
    with pytest.raises(openai.ConflictError):
        await ai.chat.completions.create(
            model="calc",
            messages=[
                QUESTION,
                assistant,
                {"role": "tool", "tool_call_id": call.id, "content": "approve"},
            ],  # type: ignore[list-item]
            extra_headers=session,
        )


async def test_streamed_and_denied(ai: openai.AsyncOpenAI, base_url: str) -> None:
    session = {"X-Session-Id": "chat-deny"}
    stream = await ai.chat.completions.create(
        model="calc", messages=[QUESTION], extra_headers=session, stream=True
    )
    calls: list[Any] = []
    finish = None
    async for chunk in stream:
        if chunk.choices:
            calls += chunk.choices[0].delta.tool_calls or []
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "tool_calls" and len(calls) == 1
    call_id = calls[0].id
    stream = await ai.chat.completions.create(
        model="calc",
        messages=[
            QUESTION,
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [calls[0].model_dump(exclude={"index"})],
            },  # type: ignore[list-item]
            {"role": "tool", "tool_call_id": call_id, "content": "Not allowed: do it by hand."},
        ],
        extra_headers=session,
        stream=True,
    )
    text = ""
    async for chunk in stream:
        if chunk.choices:
            text += chunk.choices[0].delta.content or ""
            finish = chunk.choices[0].finish_reason or finish
    assert finish == "stop" and text == "The answer is 42."
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers) as http:
        memory = (await http.get("/v1/sessions/chat-deny/memory")).json()["memory"]
    assert (
        "Not allowed: do it by hand." in memory[2]["content"] and "42" not in memory[2]["content"]
    )
