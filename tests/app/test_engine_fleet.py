"""One model on several OpenAI-compatible upstreams: routing policies and failover.

Three real HTTP servers (aiohttp, the OpenAI chat-completions wire format, streamed and not)
stand for three vLLM servers; each answers with its own name, so a reply says where it ran.
The gateway is the real app on SQLite with a model entry listing the three as ``upstreams``.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from aiohttp import web
from fastapi import FastAPI

from agents.llms.upstreams import UpstreamPool
from app.db.migrate import upgrade
from app.main import create_app
from app.models.openai_backend import OpenAIHandle, create_openai_handle
from tests.app.conftest import KEY_A, MODELS, make_agent, make_session, make_settings
from tests.lifespan import LifespanManager


@dataclass
class FakeEngine:
    """An OpenAI-compatible server named ``name``; ``delay_s`` before each answer."""

    name: str
    port: int = 0
    delay_s: float = 0.0
    requests: list[dict[str, Any]] = field(default_factory=list)
    runner: web.AppRunner | None = None
    # A prefix cache's counters as vLLM's /metrics shows them (10 "tokens" a message): a
    # message is a hit when this server saw the conversation up to it before.
    seen: set[str] = field(default_factory=set)
    queries: int = 0
    hits: int = 0

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def start(self) -> None:
        app = web.Application()
        app.router.add_post("/v1/chat/completions", self.handle)
        app.router.add_get("/metrics", self.metrics)
        self.runner = web.AppRunner(app, handler_cancellation=True)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", self.port, reuse_address=True)
        await site.start()
        self.port = self.runner.addresses[0][1]

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()
            self.runner = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append(body)
        messages = body.get("messages") or []
        for i in range(len(messages)):
            prefix = json.dumps(messages[: i + 1], sort_keys=True)
            self.queries += 10
            self.hits += 10 if prefix in self.seen else 0
            self.seen.add(prefix)
        await asyncio.sleep(self.delay_s)
        text = f"from {self.name}"
        usage = {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7}
        if not body.get("stream"):
            choice = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": "stop",
            }
            return web.json_response(
                {
                    "id": "chatcmpl-1",
                    "object": "chat.completion",
                    "created": 0,
                    "model": body["model"],
                    "choices": [choice],
                    "usage": usage,
                }
            )
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0}
        for delta, finish in (({"content": text}, None), ({}, "stop")):
            chunk = {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
            await resp.write(f"data: {json.dumps(chunk)}\n\n".encode())
        if (body.get("stream_options") or {}).get("include_usage"):
            await resp.write(
                f"data: {json.dumps({**head, 'choices': [], 'usage': usage})}\n\n".encode()
            )
        await resp.write(b"data: [DONE]\n\n")
        return resp

    async def metrics(self, _: web.Request) -> web.Response:
        text = (
            f'vllm:prefix_cache_queries_total{{engine="0"}} {float(self.queries)}\n'
            f'vllm:prefix_cache_hits_total{{engine="0"}} {float(self.hits)}\n'
        )
        return web.Response(text=text)


@pytest.fixture
async def engines() -> AsyncIterator[list[FakeEngine]]:
    fleet = [FakeEngine(f"up{i}") for i in range(3)]
    for engine in fleet:
        await engine.start()
    yield fleet
    for engine in fleet:
        await engine.stop()


@asynccontextmanager
async def gateway(
    tmp_path: Path, engines: list[FakeEngine], routing: str
) -> AsyncIterator[tuple[FastAPI, httpx.AsyncClient]]:
    """The gateway with model ``fleet`` on the three engines."""
    url = f"sqlite+aiosqlite:///{tmp_path / 'fleet.db'}"
    await asyncio.to_thread(upgrade, url)
    entry = {
        "name": "fleet",
        "backend": "openai",
        "model": "demo",
        "upstreams": [e.url for e in engines],
        "routing": routing,
        "upstream_backoff_s": 0.3,
        "upstream_max_backoff_s": 0.3,
    }
    app = create_app(make_settings(url, models=json.dumps([*MODELS, entry])))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers, timeout=30
        ) as client:
            yield app, client


def pool(app: FastAPI) -> UpstreamPool:
    handle = app.state.agentstation.models.get("fleet")
    assert isinstance(handle, OpenAIHandle) and handle.pool is not None
    return handle.pool


async def turn(client: httpx.AsyncClient, sid: str, text: str = "hello") -> str:
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": text})
    assert resp.status_code == 200, resp.text
    assert resp.json()["run"]["status"] == "completed", resp.text
    return str(resp.json()["message"]["content"])


async def chat(client: httpx.AsyncClient, messages: list[dict[str, str]], **kw: Any) -> str:
    resp = await client.post(
        "/v1/chat/completions", json={"model": "fleet", "messages": messages, **kw}
    )
    assert resp.status_code == 200, resp.text
    return str(resp.json()["choices"][0]["message"]["content"])


async def test_session_routing_keeps_each_sessions_turns_on_one_upstream(
    tmp_path: Path, engines: list[FakeEngine]
) -> None:
    async with gateway(tmp_path, engines, "session") as (_, client):
        await make_agent(client, "talker", model="fleet")
        sids = [await make_session(client, "talker") for _ in range(12)]
        homes: dict[str, set[str]] = {sid: set() for sid in sids}
        for _ in range(3):
            for sid in sids:
                homes[sid].add(await turn(client, sid))
        # A raw conversation resent whole each turn stays on one upstream too (its prefix).
        history = [{"role": "system", "content": "be brief"}, {"role": "user", "content": "q1"}]
        raw_homes = set()
        for i in range(4):
            answer = await chat(client, history)
            raw_homes.add(answer)
            history += [
                {"role": "assistant", "content": answer},
                {"role": "user", "content": f"q{i}"},
            ]
    assert all(len(h) == 1 for h in homes.values()), homes
    used = [next(iter(h)) for h in homes.values()]
    # 12 sessions over three upstreams, none above ceil(1.125 × 12 / 3) = 5 (bounded loads).
    assert sorted(set(used)) == ["from up0", "from up1", "from up2"]
    assert max(used.count(u) for u in set(used)) <= 5
    assert len(raw_homes) == 1


async def test_round_robin_takes_each_upstream_in_turn(
    tmp_path: Path, engines: list[FakeEngine]
) -> None:
    async with gateway(tmp_path, engines, "round_robin") as (_, client):
        history = [{"role": "user", "content": "same conversation"}]
        answers = [await chat(client, history) for _ in range(9)]
        streamed = await client.post(
            "/v1/chat/completions", json={"model": "fleet", "messages": history, "stream": True}
        )
    assert sorted(answers) == sorted(["from up0", "from up1", "from up2"] * 3)
    assert all(answers[i] != answers[i + 1] for i in range(8))
    assert streamed.status_code == 200 and "from up" in streamed.text


async def test_least_loaded_avoids_the_busy_upstream(
    tmp_path: Path, engines: list[FakeEngine]
) -> None:
    engines[0].delay_s = 2.0  # up0 is slow: its requests stay in flight
    async with gateway(tmp_path, engines, "least_loaded") as (_, client):
        history = [{"role": "user", "content": "hi"}]
        tasks = []
        for _ in range(12):
            tasks.append(asyncio.create_task(chat(client, history)))
            await asyncio.sleep(0.05)
        answers = await asyncio.gather(*tasks)
    # Round robin would send 4 of the 12 to up0; least loaded at most one (it stays busy).
    assert answers.count("from up0") <= 1
    assert len(engines[0].requests) <= 1


async def test_a_failed_upstream_is_taken_out_and_tried_again_after_backoff(
    tmp_path: Path, engines: list[FakeEngine]
) -> None:
    async with gateway(tmp_path, engines, "session") as (app, client):
        await make_agent(client, "talker", model="fleet")
        sids = [await make_session(client, "talker") for _ in range(9)]
        homes = {sid: await turn(client, sid) for sid in sids}
        dead = engines[1]
        moved = [sid for sid, home in homes.items() if home == f"from {dead.name}"]
        assert moved, homes  # some sessions live on up1
        await dead.stop()
        # Every turn is still answered: up1's sessions go to another upstream; the others stay.
        after = {sid: await turn(client, sid) for sid in sids}
        assert pool(app).status()[dead.url] == "down"
        assert all(after[sid] != f"from {dead.name}" for sid in moved)
        assert all(after[sid] == homes[sid] for sid in sids if sid not in moved)
        # Raw requests too, streamed or not, while up1 is out.
        for i in range(6):
            assert await chat(client, [{"role": "user", "content": f"raw {i}"}]) != "from up1"
        await dead.start()  # the same port
        await asyncio.sleep(0.35)  # the backoff
        # The moved sessions stay where they moved (their prefix is cached there now) ...
        back = {sid: await turn(client, sid) for sid in moved}
        assert pool(app).status()[dead.url] == "up"
        assert back == {sid: after[sid] for sid in moved}
        # ... and new sessions go to the upstream that came back: the other two hold all 15
        # sessions (9 agent sessions, 6 raw conversations), neither more than
        # ceil(1.125 × 15 / 2) = 9, so both at least 6, the bound for a 16th on three.
        new = [await make_session(client, "talker") for _ in range(3)]
        fresh = [await turn(client, sid) for sid in new]
    assert fresh[0] == f"from {dead.name}" and fresh.count(f"from {dead.name}") >= 2


async def test_every_upstream_down_is_a_503(tmp_path: Path, engines: list[FakeEngine]) -> None:
    async with gateway(tmp_path, engines, "round_robin") as (app, client):
        for engine in engines:
            await engine.stop()
        resp = await client.post(
            "/v1/chat/completions",
            json={"model": "fleet", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert resp.status_code == 503
        assert resp.json()["error"]["code"] == "engine_unavailable"
        assert set(pool(app).status().values()) == {"down"}


def test_a_bad_upstreams_entry_is_refused() -> None:
    with pytest.raises(ValueError, match="upstreams"):
        create_openai_handle({"name": "m", "upstreams": []})
    with pytest.raises(ValueError, match="routing"):
        create_openai_handle({"name": "m", "upstreams": ["http://a/v1"], "routing": "random"})


def test_a_fleets_routing_numbers_come_from_its_entry() -> None:
    entry = {
        "name": "fleet",
        "backend": "openai",
        "upstreams": ["http://e0:8000/v1", "http://e1:8000/v1"],
        "routing_load_factor": 1.5,
        "routing_max_sessions": 10,
        "routing_session_idle_s": 60,
    }
    handle = create_openai_handle(entry)
    assert isinstance(handle, OpenAIHandle) and handle.pool is not None
    assert (handle.pool.load_factor, handle.pool.max_sessions) == (1.5, 10)
    assert handle.pool.session_idle_s == 60
    with pytest.raises(ValueError, match="routing_load_factor must be a number of at least 1"):
        create_openai_handle({**entry, "routing_load_factor": 0.5})
    with pytest.raises(ValueError, match="routing_max_sessions"):
        create_openai_handle({**entry, "routing_max_sessions": "many"})
