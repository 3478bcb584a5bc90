"""A ``store: false`` answer of a raw model (no session, no run: what Codex sends) is built
directly, whole or as encoded frames; it must be exactly what the event mapper
(``ResponseStream``) makes of the run such a response would have logged: the same events,
fields and numbers, the same Response. Checked here against the mapper, on text, parallel
and single tool calls and a cut answer; every event and body validated with the ``openai``
package's models (SQLite and PostgreSQL)."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agents.chat_agent import reply_message
from agents.schema import AgentStatusCode
from app.main import create_app
from app.models.encoded import dumps
from app.ops.budget_store import set_tenant_budget, tenant_budget
from app.runtime.messages import dump_message
from app.schemas.responses import ResponseCreate
from app.services.responses import response_meta
from app.services.responses_events import ResponseStream
from app.services.responses_read import base_of
from app.services.responses_stateless import Answer, body_of, new_response, plain_body
from app.settings import Settings
from tests.app.test_responses import valid, valid_events
from tests.app.test_responses_tools import TOOL_MODELS, WEATHER
from tests.lifespan import LifespanManager


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    application = create_app(settings_factory(models=json.dumps(TOOL_MODELS)))
    async with LifespanManager(application):
        yield application


def _mapped(body: dict[str, Any], response: dict[str, Any], deltas: list[str]) -> Any:
    """The mapper fed the log of a run that answered as ``response`` did (its text in
    ``deltas``, its calls, usage and end)."""
    req = ResponseCreate.model_validate(body)
    base = base_of(response["id"], response["created_at"], response_meta(req, None, None),
                   req.model)  # fmt: skip
    mapper = ResponseStream(base, req.model, False)
    log: list[tuple[str, dict[str, Any]]] = [("run.created", {"run": {"status": "running"}})]
    log += [
        ("message.delta", {"index": 0, "sender": req.model, "delta": delta,
                           "stream_state": int(AgentStatusCode.STREAM_ING)})
        for delta in deltas
    ]  # fmt: skip
    calls = [
        {"id": i["call_id"], "name": i["name"], "arguments": i["arguments"]}
        for i in response["output"]
        if i["type"] == "function_call"
    ]
    reply = reply_message(req.model, "".join(deltas), calls, req.parallel_tool_calls)
    log.append(("message", {"index": 0, "message": dump_message(reply)}))
    usage = response["usage"]
    run = {
        "status": "completed",
        "stop_reason": "length" if response["status"] == "incomplete" else "end",
        "usage": {"prompt_tokens": usage["input_tokens"],
                  "completion_tokens": usage["output_tokens"]},
        "finished_at": "2026-11-27T08:00:00+00:00",
    }  # fmt: skip
    log.append(("run.completed", {"run": run}))
    events = [event for type_, data in log for event in mapper.feed(type_, data)]
    return events, mapper.response


def _same(ours: dict[str, Any], mapped: dict[str, Any]) -> None:
    assert {**ours, "completed_at": None} == {**mapped, "completed_at": None}
    assert ours["completed_at"] >= ours["created_at"]


CASES = [
    {"model": "echo", "input": "one two three"},
    {"model": "echo", "input": "one two three four", "max_output_tokens": 2},
    {"model": "twice", "input": "Weather?", "tools": [WEATHER]},
    {"model": "twice", "input": "Weather?", "tools": [WEATHER], "parallel_tool_calls": False},
    {"model": "echo", "input": [{"role": "developer", "content": "Be brief."},
                                {"role": "user", "content": "hi"}],
     "instructions": "x", "metadata": {"k": "v"}, "temperature": 0.5},
]  # fmt: skip


@pytest.mark.parametrize("case", range(len(CASES)))
async def test_a_stateless_answer_is_the_mapping_of_its_run(
    client: httpx.AsyncClient, case: int
) -> None:
    body = {**CASES[case], "store": False}
    raw = await client.post("/v1/responses", json={**body, "stream": True})
    assert raw.status_code == 200, raw.text
    events = valid_events(raw.text)
    final = events[-1]["response"]
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    mapped, response = _mapped(body, final, deltas)
    for ours, theirs in zip(events[:-1], mapped[:-1], strict=True):
        assert ours == theirs
    assert events[-1]["type"] == mapped[-1]["type"]
    _same(final, response)
    # The whole answer: the Response the mapper ends with.
    whole = await client.post("/v1/responses", json=body)
    assert whole.status_code == 200, whole.text
    answer = whole.json()
    valid(answer)
    assert "X-Session-Id" not in whole.headers
    _, response = _mapped(body, answer, [answer["output"][0]["content"][0]["text"]]
                          if answer["output"] and answer["output"][0]["type"] == "message"
                          else [])  # fmt: skip
    _same(answer, response)
    if case == 1:
        assert answer["status"] == "incomplete"
    if case == 3:
        assert [i["type"] for i in answer["output"]] == ["function_call"]


BAD_TOOLS = [
    ({"tools": [WEATHER], "tool_choice": {"type": "function", "name": "nope"}}, "tool_choice"),
    ({"tools": [{"type": "function"}]}, "tools[0].name"),
]


@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("case", range(len(BAD_TOOLS)))
async def test_a_tool_that_cannot_be_honoured_is_a_400_naming_it_streamed_or_not(
    client: httpx.AsyncClient, case: int, stream: bool
) -> None:
    # A stream too: refused before its headers, not an ``error`` event after a 200.
    fields, param = BAD_TOOLS[case]
    body = {"model": "echo", "input": "hi", "store": False, "stream": stream, **fields}
    answer = await client.post("/v1/responses", json=body)
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["param"] == param and error["type"] == "invalid_request_error"


PLAIN_REQUESTS = [
    {"model": "echo", "input": "hi", "store": False},
    {"model": "echo", "input": "hi", "store": False, "instructions": "Be \"brief\" é\n",
     "temperature": 1, "top_p": 0.5, "max_output_tokens": 7, "user": "u",
     "prompt_cache_key": "k", "tool_choice": "none", "parallel_tool_calls": False},
    {"model": "echo", "input": "hi", "store": False, "temperature": 1.0},
    {"model": "echo", "input": "hi", "store": False, "previous_response_id": ""},
    {"model": "echo", "input": "hi", "store": False, "instructions": "long " * 1000},
    {"model": "echo", "input": "hi", "store": False, "metadata": {"k": "v"},
     "text": {"format": {"type": "json_object"}}, "tools": [WEATHER, {"type": "web_search"}]},
]  # fmt: skip


@pytest.mark.parametrize("text", ["", "one two", 'a "quoted" \\ é ☃ \n line'])
@pytest.mark.parametrize("finish", ["stop", "length"])
def test_a_text_answer_is_encoded_as_its_response_would_be(text: str, finish: str) -> None:
    """The whole answer's bytes spliced from templates (each kind of request's fields encoded
    once) are ``dumps`` of the Response built field by field, and that Response is the one
    ``base_of(response_meta(...))`` starts a stored response with; twice, to read the kept
    encoding back."""
    for body in PLAIN_REQUESTS * 2:
        req = ResponseCreate.model_validate(body)
        rid = "resp_0123456789abcdef0123456789abcdef"
        assert new_response(req, rid, 17) == base_of(rid, 17, response_meta(req, None, None),
                                                     req.model)  # fmt: skip
        answer = Answer(text=text, finish=finish, prompt_tokens=3, completion_tokens=5)
        finished = 1795926731.7328777
        assert plain_body(req, rid, 17, answer, finished) == dumps(
            body_of(req, rid, 17, answer, finished)
        )


async def _used(app: FastAPI) -> int:
    state = app.state.agentstation
    async with state.sessionmaker() as db:
        return (await tenant_budget(db, "a"))[1]


async def test_a_stateless_answer_is_charged_to_the_tenant_and_refused_past_its_budget(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """Whole or streamed, the tenant pays the answer's tokens: batched without a budget,
    at once with one; a spent budget is a 429 before the model runs."""
    state = app.state.agentstation
    body = {"model": "echo", "input": "one two three", "store": False}
    stream = {**body, "stream": True}
    await state.tenant_usage.flush()
    before = await _used(app)
    whole = (await client.post("/v1/responses", json=body)).json()
    streamed = valid_events((await client.post("/v1/responses", json=stream)).text)
    spent = whole["usage"]["total_tokens"] + streamed[-1]["response"]["usage"]["total_tokens"]
    assert spent > 0
    await state.tenant_usage.flush()
    assert await _used(app) == before + spent
    async with state.sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", 1_000_000)
    whole = (await client.post("/v1/responses", json=body)).json()
    streamed = valid_events((await client.post("/v1/responses", json=stream)).text)
    more = whole["usage"]["total_tokens"] + streamed[-1]["response"]["usage"]["total_tokens"]
    assert state.tenant_usage.pending.get("a", 0) == 0
    assert await _used(app) == before + spent + more
    async with state.sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", before + spent + more)
    for request in (body, stream):
        refused = await client.post("/v1/responses", json=request)
        assert refused.status_code == 429, refused.text
    assert await _used(app) == before + spent + more
