"""The raw-model path as an OpenAI proxy (bytes passed through) and as an SSE streamer."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer
from fastapi import FastAPI

from app.main import create_app
from app.models.encoded import ChunkEncoder, dumps
from app.settings import Settings
from tests.app.conftest import KEY_A, MODELS
from tests.app.live import live_server
from tests.lifespan import LifespanManager
from tests.ops.test_gateway_ops import metric

# Odd spacing, key order and a vendor field: a re-encoding gateway could not reproduce it.
UPSTREAM_ANSWER = (
    b'{"id": "up-1",  "object": "chat.completion", "created": 7, "model": "upstream-m",'
    b' "vendor_x": {"b": 1, "a": 2}, "choices": [{"index": 0, "message": {"role": "assistant",'
    b' "content": "caf\\u00e9 \\"q\\""}, "finish_reason": "stop"}],'
    b' "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}}'
)
UPSTREAM_EVENTS = [
    b'{"id": "up-2", "object": "chat.completion.chunk", "model": "upstream-m",'
    b' "choices": [{"index": 0, "delta": {"role": "assistant", "content": "Hi"}}]}',
    b'{"id":"up-2","object":"chat.completion.chunk",'
    b'"choices":[{"index":0,"delta":{"content":" there"}}]}',
]
# One event whose JSON spans two ``data:`` lines (legal SSE): it must come out on one line.
MULTILINE_EVENT = b'data: {"id": "up-2", "choices": [],\ndata:  "usage": {"total_tokens": 9}}\n\n'


class Upstream:
    """A mock OpenAI server: records requests, answers as ``mode`` says."""

    def __init__(self) -> None:
        self.requests: list[tuple[dict[str, str], dict[str, Any]]] = []
        self.mode = "ok"
        self.gone = asyncio.Event()

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append((dict(request.headers), body))
        if self.mode != "ok":
            status = int(self.mode)
            error = {"error": {"message": f"nope {status}", "type": "x", "code": None}}
            return web.json_response(error, status=status)
        if not body.get("stream"):
            return web.Response(body=UPSTREAM_ANSWER, content_type="application/json")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for event in UPSTREAM_EVENTS:
            await resp.write(b"data: " + event + b"\n\n")
        await resp.write(MULTILINE_EVENT)
        if body.get("messages", [{}])[-1].get("content") == "endless":
            try:
                while True:  # until the gateway drops the connection
                    await resp.write(b": keep-alive\n\n")
                    await asyncio.sleep(0.01)
            except (ConnectionError, asyncio.CancelledError):
                self.gone.set()
                raise
        await resp.write(b"data: [DONE]\n\n")
        return resp


@pytest.fixture
async def upstream() -> AsyncIterator[tuple[Upstream, str]]:
    """The mock upstream on a free local port, and its ``/v1`` base URL."""
    mock = Upstream()
    web_app = web.Application()
    web_app.router.add_post("/v1/chat/completions", mock.handle)
    server = TestServer(web_app, host="127.0.0.1")
    await server.start_server()
    try:
        yield mock, str(server.make_url("/v1"))
    finally:
        await server.close()


@pytest.fixture
async def proxy(
    settings_factory: Callable[..., Settings],
    upstream: tuple[Upstream, str],
    monkeypatch: pytest.MonkeyPatch,
) -> AsyncIterator[httpx.AsyncClient]:
    """The gateway with ``remote``, an ``openai`` model in front of the mock upstream."""
    monkeypatch.setenv("UPSTREAM_KEY", "sk-upstream")
    remote = {
        "name": "remote",
        "backend": "openai",
        "base_url": upstream[1],
        "model": "upstream-m",
        "api_key_env": "UPSTREAM_KEY",
    }
    app = create_app(settings_factory(models=json.dumps([*MODELS, remote])))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as c:
            yield c


def _ask(content: str = "hi", **extra: Any) -> dict[str, Any]:
    return {"model": "remote", "messages": [{"role": "user", "content": content}], **extra}


def _events(text: str) -> list[str]:
    blocks = text.split("\n\n")
    assert blocks[-1] == "", text  # every event is terminated
    return [b.removeprefix("data: ") for b in blocks[:-1]]


async def test_proxy_answer_is_the_upstreams_bytes_and_the_model_is_renamed(
    proxy: httpx.AsyncClient, upstream: tuple[Upstream, str]
) -> None:
    client = proxy
    resp = await client.post("/v1/chat/completions", json=_ask(temperature=0.5))
    assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
    assert resp.content == UPSTREAM_ANSWER
    headers, sent = upstream[0].requests[-1]
    assert sent["model"] == "upstream-m" and sent["temperature"] == 0.5
    assert headers["Authorization"] == "Bearer sk-upstream"
    metrics = (await client.get("/metrics")).text  # the passed-through usage is still counted
    assert metric(metrics, "agentstation_tokens_total", model="remote", kind="completion") == 2


async def test_proxy_stream_passes_events_through_and_ends_with_done(
    proxy: httpx.AsyncClient, upstream: tuple[Upstream, str]
) -> None:
    client = proxy
    body = _ask(stream=True, stream_options={"include_usage": True})
    resp = await client.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200
    events = _events(resp.text)
    assert [e.encode() for e in events[:2]] == UPSTREAM_EVENTS
    assert json.loads(events[2]) == {"id": "up-2", "choices": [], "usage": {"total_tokens": 9}}
    assert events[3:] == ["[DONE]"]
    assert upstream[0].requests[-1][1]["stream"] is True
    # Not asked for: the gateway still asks the upstream for usage (to charge the tenant) but
    # does not pass the usage chunk on.
    resp = await client.post("/v1/chat/completions", json=_ask(stream=True))
    events = _events(resp.text)
    assert [e.encode() for e in events[:2]] == UPSTREAM_EVENTS and events[2:] == ["[DONE]"]
    assert upstream[0].requests[-1][1]["stream_options"] == {"include_usage": True}


@pytest.mark.parametrize(
    ("upstream_status", "status", "kind", "code"),
    [
        (400, 400, "invalid_request_error", "upstream_error"),
        (422, 422, "invalid_request_error", "upstream_error"),
        (401, 503, "server_error", "engine_unavailable"),  # the gateway's key: not the caller's
        (404, 503, "server_error", "engine_unavailable"),  # the configured model name
        (429, 503, "server_error", "engine_unavailable"),
        (500, 503, "server_error", "engine_unavailable"),
    ],
)
async def test_upstream_errors(
    proxy: httpx.AsyncClient,
    upstream: tuple[Upstream, str],
    upstream_status: int,
    status: int,
    kind: str,
    code: str,
) -> None:
    client = proxy
    upstream[0].mode = str(upstream_status)
    for stream in (False, True):
        resp = await client.post("/v1/chat/completions", json=_ask(stream=stream))
        assert resp.status_code == status, resp.text
        error = resp.json()["error"]
        assert (error["type"], error["code"]) == (kind, code)
        assert "127.0.0.1" not in error["message"]  # never the upstream's address
        if status < 500:  # the caller's request was refused: the upstream's words help
            assert f"nope {upstream_status}" in error["message"]
        else:  # the gateway's own problem (its key, its model name, the upstream's load)
            expected = f"upstream error {upstream_status}"
            if upstream_status in (429, 500):  # retried, then given up on
                expected = "upstream model unreachable"
            assert error["message"] == expected  # the upstream's words are in the log only
    assert len(upstream[0].requests) == 2  # no retries: the caller's SDK retries


async def test_client_leaving_a_proxied_stream_drops_the_upstream_connection(
    settings_factory: Callable[..., Settings], upstream: tuple[Upstream, str]
) -> None:
    remote = {"name": "remote", "backend": "openai", "base_url": upstream[1]}
    settings = settings_factory(models=json.dumps([remote]), api_keys="")
    with live_server(settings) as gateway:  # ASGITransport buffers whole bodies: a real server
        async with (
            httpx.AsyncClient(base_url=gateway, timeout=30) as c,
            c.stream("POST", "/v1/chat/completions", json=_ask("endless", stream=True)) as resp,
        ):
            first = await anext(resp.aiter_text())
            assert first.startswith("data: {")  # the stream has begun; the client goes away
        await asyncio.wait_for(upstream[0].gone.wait(), 10)


async def test_shutdown_closes_the_upstream_session(
    settings_factory: Callable[..., Settings], upstream: tuple[Upstream, str]
) -> None:
    remote = {"name": "remote", "backend": "openai", "base_url": upstream[1]}
    app = create_app(settings_factory(models=json.dumps([remote])))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as c:
            assert (await c.post("/v1/chat/completions", json=_ask())).status_code == 200
        raw = app.state.agentstation.models.get("remote").raw
        sessions = list(raw.client._sessions.values())
        assert len(sessions) == 1 and not sessions[0].closed
    assert sessions[0].closed


@pytest.mark.parametrize(
    "text",
    [
        "plain",
        ' "quoted" \\ back',
        "new\nline\ttab\r",
        "café ☕ 𝄞",
        "\x00\x1f\x7f",
        "\u2028\u2029",
        "",
    ],
)
def test_spliced_chunks_are_the_same_bytes_as_encoding_them_whole(text: str) -> None:
    base = {"id": "chatcmpl-x", "object": "chat.completion.chunk", "created": 1, "model": 'm"é'}
    enc = ChunkEncoder(base)
    for index in (0, 3, 12):
        chunk = enc.content(index, text)
        whole = {
            **base,
            "choices": [
                {
                    "index": index,
                    "delta": {"content": text},
                    "finish_reason": None,
                    "logprobs": None,
                }
            ],
        }
        assert chunk == whole
        assert chunk.raw == dumps(whole)
        assert json.loads(chunk.raw) == whole


async def test_raw_stream_events_are_compact_json_lines(client: httpx.AsyncClient) -> None:
    body = {
        "model": "echo",
        "messages": [{"role": "user", "content": 'say "é"\\ \u2028 ok'}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    resp = await client.post("/v1/chat/completions", json=body)
    events = _events(resp.text)
    assert events[-1] == "[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert [dumps(c).decode() for c in chunks] == events[:-1]  # what the gateway always wrote
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == 'say "é"\\ \u2028 ok'
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1
    assert chunks[-1]["usage"]["completion_tokens"] == 3  # \u2028 is whitespace too


async def test_stream_metrics_and_request_id_cover_the_whole_response(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    body = {"model": "slow", "messages": [{"role": "user", "content": "x"}], "stream": True}
    resp = await client.post("/v1/chat/completions", json=body, headers={"x-request-id": "r-1"})
    assert resp.status_code == 200 and resp.headers["x-request-id"] == "r-1"
    assert _events(resp.text)[-1] == "[DONE]"
    metrics = (await client.get("/metrics")).text
    route = {"method": "POST", "route": "/v1/chat/completions"}
    assert metric(metrics, "agentstation_http_requests_total", **route, status="200") == 1
    # Ten words 0.2 s apart: timed until the body ended, so at least 1.8 s (a lower bound).
    assert metric(metrics, "agentstation_http_request_duration_seconds_sum", **route) >= 1.8
