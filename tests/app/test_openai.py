"""OpenAI-compatible /v1/models and /v1/chat/completions through ASGITransport."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from starlette.responses import JSONResponse, Response

from app.api.openai import RequestOnlyRoute
from app.models.encoded import dumps
from tests.app.conftest import KEY_A, make_agent
from tests.app.test_runs import _Broken


def _chunks(text: str) -> list[Any]:
    out: list[Any] = []
    for block in text.strip().split("\n\n"):
        assert block.startswith("data: "), block
        payload = block[len("data: ") :]
        out.append(payload if payload == "[DONE]" else json.loads(payload))
    return out


async def test_models_lists_agents_and_raw_models(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper")
    data = (await client.get("/v1/models")).json()
    assert data["object"] == "list"
    ids = [m["id"] for m in data["data"]]
    assert ids == ["helper", "echo", "poet", "slow"]
    assert all(m["owned_by"] == "agentstation" and m["object"] == "model" for m in data["data"])
    assert (await client.get("/v1/models/helper")).json()["id"] == "helper"
    assert (await client.get("/v1/models/poet")).json()["id"] == "poet"
    missing = await client.get("/v1/models/nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


async def test_agent_completion_stateless(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper")
    resp = await client.post(
        "/v1/chat/completions",
        json={
            "model": "helper",
            "messages": [
                {"role": "system", "content": "ignored: the agent has its own"},
                {"role": "user", "content": "first"},
                {"role": "assistant", "content": "first"},
                {"role": "user", "content": "second question"},
            ],
            "some_future_field": {"x": 1},
        },
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert body["object"] == "chat.completion" and body["model"] == "helper"
    choice = body["choices"][0]
    assert choice["message"] == {"role": "assistant", "content": "second question"}
    assert choice["finish_reason"] == "stop"
    # The history (2 words) and the question (2 words) are the prompt.
    assert body["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    assert (await client.get("/v1/sessions")).json()["data"] == []  # nothing stored
    # The bytes and content type a JSONResponse would send.
    assert resp.content == JSONResponse(body).body
    assert resp.headers["content-type"] == "application/json"


async def test_agent_stream_with_usage(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper", model="poet")
    resp = await client.post(
        "/v1/chat/completions",
        json={
            "model": "helper",
            "messages": [{"role": "user", "content": "hi"}],
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    chunks = _chunks(resp.text)
    assert chunks[-1] == "[DONE]"
    # Every event is the compact encoding of its object (text chunks are spliced, not dumped).
    events = [b.removeprefix("data: ") for b in resp.text.strip().split("\n\n")[:-1]]
    assert [dumps(json.loads(e)).decode() for e in events] == events
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert all("role" not in c["choices"][0]["delta"] for c in chunks[1:-2])
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-2])
    assert text == "Roses are red."
    assert chunks[-3]["choices"][0]["finish_reason"] == "stop"
    assert chunks[-2]["choices"] == [] and chunks[-2]["usage"]["completion_tokens"] == 3


async def test_agent_on_persistent_session(client: httpx.AsyncClient) -> None:
    await make_agent(client, "helper")
    headers = {"X-Session-Id": "chat-1"}
    history: list[dict[str, str]] = [{"role": "user", "content": "one"}]
    resp = await client.post(
        "/v1/chat/completions", headers=headers, json={"model": "helper", "messages": history}
    )
    assert resp.json()["choices"][0]["message"]["content"] == "one"
    history += [{"role": "assistant", "content": "one"}, {"role": "user", "content": "two"}]
    resp = await client.post(
        "/v1/chat/completions",
        headers=headers,
        json={"model": "helper", "messages": history, "stream": True},
    )
    text = "".join(
        c["choices"][0]["delta"].get("content", "") for c in _chunks(resp.text)[:-1] if c["choices"]
    )
    assert text == "two"
    memory = (await client.get("/v1/sessions/chat-1/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["one", "one", "two", "two"]  # only new user turns
    assert len((await client.get("/v1/sessions/chat-1/runs")).json()["data"]) == 2
    await make_agent(client, "other")
    wrong = await client.post(
        "/v1/chat/completions", headers=headers, json={"model": "other", "messages": history}
    )
    assert wrong.status_code == 400


async def test_raw_model_completion_and_stream(client: httpx.AsyncClient) -> None:
    body = {"model": "poet", "messages": [{"role": "user", "content": "a poem"}], "n": 2}
    resp = (await client.post("/v1/chat/completions", json=body)).json()
    assert [c["message"]["content"] for c in resp["choices"]] == [
        "Roses are red.",
        "Violets are blue.",
    ]
    assert resp["usage"]["completion_tokens"] == 6
    resp = await client.post(
        "/v1/chat/completions",
        json={
            "model": "echo",
            "messages": [{"role": "user", "content": "a b c d"}],
            "max_tokens": 2,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    chunks = _chunks(resp.text)
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-1] if c["choices"])
    assert text == "a b "
    assert [c["choices"][0]["finish_reason"] for c in chunks[:-1] if c["choices"]][-1] == "length"
    assert chunks[-2]["usage"] == {"prompt_tokens": 4, "completion_tokens": 2, "total_tokens": 6}
    stop = (
        await client.post(
            "/v1/chat/completions",
            json={
                "model": "echo",
                "messages": [{"role": "user", "content": "one two three"}],
                "stop": [" two"],
            },
        )
    ).json()
    assert stop["choices"][0]["message"]["content"] == "one"


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"messages": [{"role": "user", "content": "x"}]}, "model"),
        ({"model": "echo", "messages": []}, "messages"),
        ({"model": "echo", "messages": [{"role": "robot", "content": "x"}]}, "messages[0].role"),
        (
            {
                "model": "echo",
                "messages": [{"role": "user", "content": "x"}],
                "stream_options": {"include_usage": True},
            },
            "stream_options",
        ),
        (
            {"model": "echo", "messages": [{"role": "user", "content": "x"}], "temperature": 3},
            "temperature",
        ),
        ({"model": "echo", "messages": [{"role": "tool", "content": "x"}]}, "messages[0]"),
        (
            {"model": "echo", "messages": [{"role": "user", "content": "x"}], "stop": ["a"] * 5},
            "stop",
        ),
    ],
)
async def test_bad_requests_are_400_naming_the_field(
    client: httpx.AsyncClient, body: dict[str, Any], param: str
) -> None:
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 400, resp.text
    assert resp.json()["error"]["param"] == param
    assert resp.json()["error"]["type"] == "invalid_request_error"


async def test_unknown_model_and_bad_agent_input(client: httpx.AsyncClient) -> None:
    resp = await client.post(
        "/v1/chat/completions",
        json={"model": "nope", "messages": [{"role": "user", "content": "x"}]},
    )
    assert resp.status_code == 404 and resp.json()["error"]["code"] == "model_not_found"
    await make_agent(client, "helper")
    resp = await client.post(
        "/v1/chat/completions",
        json={
            "model": "helper",
            "messages": [{"role": "user", "content": "x"}, {"role": "assistant", "content": "y"}],
            "stream": True,
        },
    )
    assert resp.status_code == 400 and resp.json()["error"]["param"] == "messages"


async def test_agent_failure_mid_stream_is_an_in_stream_error(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    app.state.agentstation.registry.add_kind("broken", lambda spec, ctx: _Broken())
    await make_agent(client, "fragile", kind="broken")
    resp = await client.post(
        "/v1/chat/completions",
        json={"model": "fragile", "messages": [{"role": "user", "content": "x"}], "stream": True},
    )
    assert resp.status_code == 200
    chunks = _chunks(resp.text)
    assert chunks[-1] == "[DONE]"
    assert chunks[-2]["error"]["code"] == "internal_error"
    assert "exploded" not in chunks[-2]["error"]["message"]  # the log has it
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks[:-2])
    assert text == "partial"


async def test_chat_headers_are_checked_and_documented(app: FastAPI) -> None:
    """X-Session-Id and Authorization are read by the endpoint itself: same errors, same docs."""
    body = {"model": "echo", "messages": [{"role": "user", "content": "x"}]}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as anon:
        # No key: 401, even when the body is invalid too (authentication comes first).
        for sent in (body, {"model": "echo", "messages": []}):
            resp = await anon.post("/v1/chat/completions", json=sent)
            assert resp.status_code == 401, resp.text
            assert resp.json()["error"]["code"] == "invalid_api_key"
        resp = await anon.post(
            "/v1/chat/completions", json=body, headers={"Authorization": "Basic abc"}
        )
        assert resp.status_code == 401
        assert "expected Bearer" in resp.json()["error"]["message"]
        long_id = {"Authorization": f"Bearer {KEY_A}", "X-Session-Id": "s" * 129}
        resp = await anon.post("/v1/chat/completions", json=body, headers=long_id)
        assert resp.status_code == 400, resp.text
        assert resp.json() == {
            "error": {
                "message": "X-Session-Id: String should have at most 128 characters",
                "type": "invalid_request_error",
                "param": "X-Session-Id",
                "code": "invalid_value",
            }
        }
        operation = (await anon.get("/openapi.json")).json()["paths"]["/v1/chat/completions"]
    params = {p["name"]: p for p in operation["post"]["parameters"]}
    # The key: a security scheme, not a parameter.
    assert params.keys() == {"X-Session-Id", "X-Multitask-Strategy", "Idempotency-Key"}
    assert operation["post"]["security"] == [{"bearerAuth": []}]
    assert params["X-Session-Id"]["in"] == "header"
    assert params["X-Session-Id"]["schema"]["maxLength"] == 128
    body_doc = operation["post"]["requestBody"]
    assert body_doc["required"] is True
    schema = body_doc["content"]["application/json"]["schema"]
    assert schema["title"] == "ChatCompletionRequest" and "$defs" not in json.dumps(schema)
    assert schema["required"] == ["model", "messages"]
    assert schema["properties"]["messages"]["items"]["title"] == "ChatMessage"  # inlined


_VALID = json.dumps({"model": "echo", "messages": [{"role": "user", "content": "x"}]}).encode()
_JSON = {"content-type": "application/json"}
_INVALID_BODY = (
    400,
    "invalid_body",
    "the request body must be a JSON object (send Content-Type: application/json)",
    None,
)


@pytest.mark.parametrize(
    ("content", "headers", "expected"),
    [
        (b"{", _JSON, (400, "invalid_json", "invalid JSON body: JSON decode error", None)),
        (_VALID, {}, _INVALID_BODY),  # no content type: not read as JSON
        (_VALID, {"content-type": "text/plain"}, _INVALID_BODY),
        (_VALID, {"content-type": "application/json/x"}, _INVALID_BODY),
        (_VALID, {"content-type": "application/vnd.api+json"}, 200),
        (_VALID, {"content-type": "Application/JSON ; charset=utf-8"}, 200),
        (b"", _JSON, _INVALID_BODY),
        (b"[]", _JSON, _INVALID_BODY),
        (  # not UTF-8
            b'{"model": "\xff"}',
            _JSON,
            (400, "invalid_request", "There was an error parsing the body", None),
        ),
        (b'{"messages": []}', _JSON, (400, "missing_field", "model: Field required", "model")),
        (
            b'{"model": "echo", "messages": [{"role": "user", "content": 5}]}',
            _JSON,
            (
                400,
                "invalid_value",
                "messages[0].content.str: Input should be a valid string",
                "messages[0].content.str",
            ),
        ),
        # Unparsable JSON is refused before the key is checked; invalid fields after it.
        (b"{", {**_JSON, "authorization": ""}, (400, "invalid_json", None, None)),
        (b"[]", {**_JSON, "authorization": ""}, (401, "invalid_api_key", None, None)),
        # The headers are checked before the body's fields.
        (
            b"[]",
            {**_JSON, "x-session-id": "s" * 129},
            (400, "invalid_value", None, "X-Session-Id"),
        ),
    ],
)
async def test_chat_body_is_read_as_a_declared_body_would_be(
    client: httpx.AsyncClient, content: bytes, headers: dict[str, str], expected: Any
) -> None:
    """The endpoint parses its body itself: the same answers FastAPI gave for a declared one."""
    if headers.get("authorization") == "":
        headers = {k: v for k, v in headers.items() if k != "authorization"}
        client.headers.pop("authorization")
    resp = await client.post("/v1/chat/completions", content=content, headers=headers)
    if expected == 200:
        assert resp.status_code == 200, resp.text
        return
    status, code, message, param = expected
    assert resp.status_code == status, resp.text
    error = resp.json()["error"]
    assert error["code"] == code and error["param"] == param
    assert message is None or error["message"] == message


async def test_request_only_route_keeps_fastapi_semantics_where_it_must() -> None:
    """chat/completions skips FastAPI's per-request handler; any dependency brings it back."""

    async def endpoint(request: Request) -> Response:
        return JSONResponse({"q": request.query_params.get("q")})

    async def forbid() -> None:
        raise HTTPException(403, "no")

    router = APIRouter()
    router.add_api_route("/a", endpoint, methods=["GET"], route_class_override=RequestOnlyRoute)
    app = FastAPI()
    app.include_router(router)
    app.include_router(router, prefix="/guarded", dependencies=[Depends(forbid)])
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        assert (await c.get("/a?q=1")).json() == {"q": "1"}
        assert (await c.get("/guarded/a?q=1")).status_code == 403  # the dependency ran
        assert (await c.post("/a")).status_code == 405
    assert "/a" in app.openapi()["paths"]
    routes = {r.path: r for r in app.routes if isinstance(r, RequestOnlyRoute)}
    assert "RequestOnlyRoute" in routes["/a"].get_route_handler().__qualname__  # direct
    assert "RequestOnlyRoute" not in routes["/guarded/a"].get_route_handler().__qualname__
