"""The OpenAI front door with an agent behind it tells the truth (issue 12, defects 3-6, 8):
bad session ids are 400s, fields an agent cannot honour are refused, a tool agent streams what
it answers, busy sessions follow the REST strategies, numbers are numbers."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from app.main import create_app
from tests.app.conftest import KEY_A, MODELS, make_agent, make_settings
from tests.lifespan import LifespanManager

CALL = {"name": "Calculator", "parameters": {"expression": "6*7"}}
TOOL_REPLIES = [f"Let me compute.\n```json\n{json.dumps(CALL)}\n```\n", "The answer is 42."]


@pytest.fixture
async def client(database_url: str) -> AsyncIterator[httpx.AsyncClient]:
    models = [
        *MODELS,
        {"name": "tooler", "backend": "scripted", "replies": TOOL_REPLIES},
        {"name": "jsonish", "backend": "scripted", "replies": ['{"a": 1}', "not json"]},
    ]
    app = create_app(make_settings(database_url, models=json.dumps(models)))
    async with LifespanManager(app):
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://t", headers=headers
        ) as c:
            yield c


def chat(model: str, text: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def streamed_text(body: str) -> tuple[str, str | None]:
    """The content of an SSE chat stream and its finish_reason."""
    text, finish = "", None
    for line in body.splitlines():
        if not line.startswith("data: ") or line == "data: [DONE]":
            continue
        chunk = json.loads(line[6:])
        for choice in chunk.get("choices", []):
            text += choice["delta"].get("content") or ""
            finish = choice.get("finish_reason") or finish
    return text, finish


async def test_a_bad_session_id_is_a_400_naming_the_header(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper")
    resp = await client.post(
        "/v1/chat/completions", json=chat("helper"), headers={"X-Session-Id": "bad id!"}
    )
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "invalid_value" and error["param"] == "X-Session-Id"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("tools", [{"type": "function", "function": {"name": "f", "parameters": {}}}]),
        ("tool_choice", "required"),
        ("n", 2),
        ("logprobs", True),
        ("presence_penalty", 0.5),
        ("frequency_penalty", -1.0),
        ("response_format", {"type": "json_schema", "json_schema": {"name": "x"}}),
    ],
)
async def test_fields_an_agent_cannot_honour_are_refused(
    client: httpx.AsyncClient, field: str, value: Any
) -> None:
    await make_agent(client, "helper")
    resp = await client.post("/v1/chat/completions", json=chat("helper", **{field: value}))
    assert resp.status_code == 400, resp.text
    error = resp.json()["error"]
    assert error["code"] == "unsupported_parameter" and error["param"] == field
    # Their no-op values are fine, and a raw model still takes them.
    ok = {"n": 1, "tool_choice": "auto", "logprobs": False, "presence_penalty": 0}
    assert (await client.post("/v1/chat/completions", json=chat("helper", **ok))).is_success


async def test_response_format_json_object_is_checked(client: httpx.AsyncClient) -> None:
    await make_agent(client, "jsoner", model="jsonish")
    fmt = {"response_format": {"type": "json_object"}}
    good = await client.post("/v1/chat/completions", json=chat("jsoner", **fmt))
    assert good.json()["choices"][0]["message"]["content"] == '{"a": 1}'
    bad = await client.post("/v1/chat/completions", json=chat("jsoner", **fmt))
    assert bad.status_code == 503 and bad.json()["error"]["code"] == "invalid_agent_output"


async def test_finish_reason_is_length_when_max_tokens_cut_the_answer(
    client: httpx.AsyncClient,
) -> None:
    await make_agent(client, "poem", model="poet")
    cut = await client.post("/v1/chat/completions", json=chat("poem", max_tokens=1))
    assert cut.json()["choices"][0]["finish_reason"] == "length", cut.text
    whole = await client.post("/v1/chat/completions", json=chat("poem"))
    assert whole.json()["choices"][0]["finish_reason"] == "stop"
    # On a session too (the run's stop_reason says why).
    headers = {"X-Session-Id": "cut-1"}
    resp = await client.post(
        "/v1/chat/completions", json=chat("poem", max_tokens=1), headers=headers
    )
    assert resp.json()["choices"][0]["finish_reason"] == "length", resp.text
    runs = (await client.get("/v1/sessions/cut-1/runs")).json()["data"]
    assert runs[0]["stop_reason"] == "length"


@pytest.mark.parametrize("session", [None, "tools-1"])
async def test_a_tool_agent_streams_exactly_what_it_answers(
    client: httpx.AsyncClient, session: str | None
) -> None:
    spec = {"kind": "tool_agent", "model": "tooler", "tools": [{"name": "Calculator"}]}
    assert (await client.post("/v1/agents", json={"name": "calc", "spec": spec})).is_success
    headers = {"X-Session-Id": session} if session else {}
    whole = await client.post("/v1/chat/completions", json=chat("calc"), headers=headers)
    answer = whole.json()["choices"][0]["message"]["content"]
    streamed = await client.post(
        "/v1/chat/completions", json=chat("calc", stream=True), headers=headers
    )
    text, finish = streamed_text(streamed.text)
    assert answer == text == "The answer is 42."
    assert "```json" not in streamed.text and finish == "stop"


async def test_a_busy_session_follows_the_strategy(client: httpx.AsyncClient) -> None:
    await make_agent(client, "slowpoke", model="slow")
    headers = {"X-Session-Id": "busy-1"}
    first = asyncio.create_task(
        client.post("/v1/chat/completions", json=chat("slowpoke"), headers=headers)
    )
    for _ in range(200):  # until the first run holds the session
        runs = (await client.get("/v1/sessions/busy-1/runs")).json() if _ else {"data": []}
        if runs.get("data"):
            break
        await asyncio.sleep(0.02)
    rejected = await client.post("/v1/chat/completions", json=chat("slowpoke"), headers=headers)
    assert rejected.status_code == 409, rejected.text
    assert rejected.json()["error"]["code"] == "session_busy"
    queued = await client.post(
        "/v1/chat/completions",
        json=chat("slowpoke"),
        headers={**headers, "X-Multitask-Strategy": "enqueue"},
    )
    assert queued.status_code == 200
    assert (await first).status_code == 200
    bad = await client.post(
        "/v1/chat/completions",
        json=chat("slowpoke"),
        headers={**headers, "X-Multitask-Strategy": "sometimes"},
    )
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "X-Multitask-Strategy"


async def test_an_agents_own_strategy_is_its_default(client: httpx.AsyncClient) -> None:
    await make_agent(client, "patient", model="slow", multitask_strategy="enqueue")
    headers = {"X-Session-Id": "queue-1"}
    first = asyncio.create_task(
        client.post("/v1/chat/completions", json=chat("patient"), headers=headers)
    )
    await asyncio.sleep(0.1)
    second = await client.post("/v1/chat/completions", json=chat("patient"), headers=headers)
    assert second.status_code == 200 and (await first).status_code == 200


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        ("/v1/chat/completions", chat("poet", temperature=True), "temperature"),
        ("/v1/chat/completions", chat("poet", seed=False), "seed"),
        ("/v1/chat/completions", chat("poet", max_tokens="5"), "max_tokens"),
        ("/v1/chat/completions", chat("poet", stream="yes"), "stream"),
    ],
)
async def test_numbers_are_numbers_in_chat(
    client: httpx.AsyncClient, path: str, body: dict[str, Any], param: str
) -> None:
    resp = await client.post(path, json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param


@pytest.mark.parametrize(
    ("gen_params", "param"),
    [
        ({"seed": False}, "spec.gen_params.seed"),
        ({"temperature": True}, "spec.gen_params.temperature"),
    ],
)
async def test_numbers_are_numbers_in_specs(
    client: httpx.AsyncClient, gen_params: dict[str, Any], param: str
) -> None:
    spec = {"kind": "agent", "model": "echo", "gen_params": gen_params}
    resp = await client.post("/v1/agents", json={"name": "strict", "spec": spec})
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"]["param"] == param
    sid_agent = await make_agent(client, "loose")
    sid = (await client.post("/v1/sessions", json={"agent": sid_agent["name"]})).json()["id"]
    run = await client.post(
        f"/v1/sessions/{sid}/messages", json={"message": "x", "gen_params": gen_params}
    )
    assert run.status_code == 422 and run.json()["error"]["param"] == param.replace("spec.", "")
