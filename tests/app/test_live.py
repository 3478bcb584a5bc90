"""Against a live uvicorn: SSE resume after a drop, 409 and fast cancel, enqueue, the openai SDK."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import openai
import pytest

from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent, make_session, parse_sse, wait_runs
from tests.app.live import live_server

pytestmark = pytest.mark.live
SLOW_TEXT = "one two three four five six seven eight nine ten"


@pytest.fixture
def base_url(settings_factory: Callable[..., Settings]) -> Iterator[str]:
    with live_server(settings_factory()) as url:
        yield url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as c:
        yield c


class Events:
    """Reads SSE events (not comments) from a streaming response, across several calls."""

    def __init__(self, resp: httpx.Response) -> None:
        self.chunks = resp.aiter_text()
        self.buffer = ""

    async def read(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The next ``limit`` events (all remaining ones without a limit)."""
        events: list[dict[str, Any]] = []
        while limit is None or len(events) < limit:
            if "\n\n" not in self.buffer:
                try:
                    self.buffer += (await anext(self.chunks)).replace("\r\n", "\n")
                except StopAsyncIteration:
                    break
                continue
            block, self.buffer = self.buffer.split("\n\n", 1)
            events += [f for f in parse_sse(block + "\n\n") if "event" in f]
        return events


async def _read_events(resp: httpx.Response, limit: int | None = None) -> list[dict[str, Any]]:
    return await Events(resp).read(limit)


async def test_sse_resume_after_drop_while_run_continues(http: httpx.AsyncClient) -> None:
    await make_agent(http, model="slow")
    sid = await make_session(http)
    body = {"message": "go", "stream": True, "on_disconnect": "continue"}
    async with http.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
        location = resp.headers["content-location"]
        first = await _read_events(resp, limit=3)  # run.created + two deltas, then drop
    assert [e["event"] for e in first][:1] == ["run.created"]
    last_id = first[-1]["id"]
    headers = {"Last-Event-ID": last_id}
    async with http.stream("GET", f"{location}/events", headers=headers) as resp:
        rest = await _read_events(resp)
    ids = [int(e["id"]) for e in first + rest]
    assert ids == list(range(1, len(ids) + 1))  # no gap, no duplicate
    assert rest[-1]["event"] == "run.completed"
    text = "".join(e["data"]["delta"] for e in first + rest if e["event"] == "message.delta")
    assert text == SLOW_TEXT
    memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert memory[-1]["content"] == SLOW_TEXT


async def test_drop_cancels_by_default(http: httpx.AsyncClient) -> None:
    await make_agent(http, model="slow")
    sid = await make_session(http)
    async with http.stream(
        "POST", f"/v1/sessions/{sid}/messages", json={"message": "go", "stream": True}
    ) as resp:
        run_id = resp.headers["content-location"].rsplit("/", 1)[1]
        await _read_events(resp, limit=2)
    for _ in range(100):
        run = (await http.get(f"/v1/runs/{run_id}")).json()
        if run["status"] != "running":
            break
        await asyncio.sleep(0.05)
    assert run["status"] == "cancelled" and run["stop_reason"] == "client_disconnected"


async def test_busy_409_then_cancel_within_a_second(http: httpx.AsyncClient) -> None:
    await make_agent(http, model="slow")
    sid = await make_session(http)
    async with http.stream(
        "POST", f"/v1/sessions/{sid}/messages", json={"message": "go", "stream": True}
    ) as resp:
        run_id = resp.headers["content-location"].rsplit("/", 1)[1]
        events = Events(resp)
        await events.read(limit=2)
        busy = await http.post(f"/v1/sessions/{sid}/messages", json={"message": "again"})
        assert busy.status_code == 409 and busy.headers["x-should-retry"] == "false"
        assert busy.json()["error"]["code"] == "session_busy"
        started = time.monotonic()
        cancelled = await http.post(f"/v1/runs/{run_id}/cancel")
        assert time.monotonic() - started < 1.0
        assert cancelled.json()["status"] == "cancelled"
        rest = await events.read()
    assert rest[-1]["event"] == "run.cancelled"
    assert rest[-1]["data"]["run"]["status"] == "cancelled"


async def test_enqueue_keeps_order(http: httpx.AsyncClient) -> None:
    await make_agent(http, model="slow")
    sid = await make_session(http)

    async def send(text: str) -> dict[str, Any]:
        resp = await http.post(
            f"/v1/sessions/{sid}/messages", json={"message": text, "multitask_strategy": "enqueue"}
        )
        return dict(resp.json()["run"])

    runs = []
    for count, text in enumerate(("a", "b", "c"), start=1):
        runs.append(asyncio.create_task(send(text)))
        await wait_runs(http, sid, count)  # each message is queued before the next is sent
    done = [await r for r in runs]
    assert [r["status"] for r in done] == ["completed"] * 3
    assert done[0]["finished_at"] <= done[1]["started_at"] <= done[1]["finished_at"]
    assert done[1]["finished_at"] <= done[2]["started_at"]
    memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    assert [m["content"] for m in memory if m["sender"] == "user"] == ["a", "b", "c"]


@pytest.fixture
async def sdk(base_url: str) -> AsyncIterator[openai.AsyncOpenAI]:
    async with openai.AsyncOpenAI(api_key=KEY_A, base_url=f"{base_url}/v1", max_retries=0) as c:
        yield c


async def test_openai_sdk_non_stream_and_stream(
    http: httpx.AsyncClient, sdk: openai.AsyncOpenAI
) -> None:
    await make_agent(http, "helper", model="poet")
    reply = await sdk.chat.completions.create(
        model="helper", messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content == "Roses are red."
    assert reply.choices[0].finish_reason == "stop" and reply.usage is not None
    stream = await sdk.chat.completions.create(
        model="poet",
        messages=[{"role": "user", "content": "hi"}],
        stream=True,
        stream_options={"include_usage": True},
    )
    pieces, usage = [], None
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            pieces.append(chunk.choices[0].delta.content)
        if chunk.usage is not None:
            usage = chunk.usage
    assert "".join(pieces) == "Violets are blue."  # the model's replies are cycled
    assert usage is not None and usage.completion_tokens == 3
    async with sdk.chat.completions.stream(
        model="helper", messages=[{"role": "user", "content": "hi"}]
    ) as helper:
        async for _ in helper:
            pass
        final = await helper.get_final_completion()
    assert final.choices[0].message.content == "Roses are red."
    models = [m.id async for m in sdk.models.list()]
    assert models[0] == "helper" and "poet" in models


async def test_openai_sdk_errors(sdk: openai.AsyncOpenAI, base_url: str) -> None:
    with pytest.raises(openai.NotFoundError):
        await sdk.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    with pytest.raises(openai.BadRequestError) as bad:
        await sdk.chat.completions.create(
            model="echo", messages=[{"role": "user", "content": "x"}], temperature=5
        )
    assert bad.value.param == "temperature"
    async with openai.AsyncOpenAI(api_key="wrong", base_url=f"{base_url}/v1", max_retries=0) as c:
        with pytest.raises(openai.AuthenticationError):
            await c.models.list()


async def test_openai_backend_against_a_live_upstream(
    base_url: str, settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    models = json.dumps(
        [
            {
                "name": "remote",
                "backend": "openai",
                "base_url": f"{base_url}/v1",
                "model": "poet",
                "api_key_env": "UPSTREAM_KEY",
            }
        ]
    )
    monkeypatch.setenv("UPSTREAM_KEY", KEY_A)
    with live_server(settings_factory(models=models, api_keys="z:zkey")) as gateway:
        headers = {"Authorization": "Bearer zkey"}
        async with httpx.AsyncClient(base_url=gateway, headers=headers, timeout=30) as c:
            raw = await c.post(
                "/v1/chat/completions",
                json={"model": "remote", "messages": [{"role": "user", "content": "x"}]},
            )
            assert raw.json()["choices"][0]["message"]["content"] == "Roses are red."
            await make_agent(c, "relay", model="remote")
            sid = await make_session(c, "relay")
            resp = await c.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
            assert resp.json()["message"]["content"] == "Violets are blue."
            streamed = await c.post(
                "/v1/chat/completions",
                json={
                    "model": "remote",
                    "messages": [{"role": "user", "content": "x"}],
                    "stream": True,
                    "stream_options": {"include_usage": True},
                },
            )
            chunks = [
                json.loads(line[6:])
                for line in streamed.text.splitlines()
                if line.startswith("data: {")
            ]
            text = "".join(
                ch["choices"][0]["delta"].get("content") or "" for ch in chunks if ch["choices"]
            )
            assert text == "Roses are red." and chunks[-1]["usage"]["completion_tokens"] == 3
            assert streamed.text.rstrip().endswith("data: [DONE]")


async def test_non_stream_client_gone_cancels_the_run(http: httpx.AsyncClient) -> None:
    await make_agent(http, model="slow")
    sid = await make_session(http)
    with pytest.raises(httpx.ReadTimeout):
        await http.post(f"/v1/sessions/{sid}/messages", json={"message": "go"}, timeout=0.6)
    for _ in range(100):
        run = (await http.get(f"/v1/sessions/{sid}/runs")).json()["data"][0]
        if run["status"] != "running":
            break
        await asyncio.sleep(0.05)
    assert run["status"] == "cancelled" and run["stop_reason"] == "client_disconnected"
