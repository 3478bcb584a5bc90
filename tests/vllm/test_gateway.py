"""The gateway on the real engine: the official ``openai`` client and an agent session.

The server is uvicorn on 127.0.0.1, served from the test's own event loop, so the app shares
the session's engine (same model config) instead of loading a second one.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import pytest
import uvicorn
from openai import AsyncOpenAI

from app.engines.vllm import VllmHandle
from app.main import create_app
from app.settings import Settings
from tests.vllm.conftest import ENGINE_ARGS

pytestmark = [pytest.mark.vllm, pytest.mark.live]
KEY = "sk-engine-test"
HELLO: Any = [{"role": "user", "content": "Hello, who are you?"}]


@pytest.fixture(scope="module")
async def base_url(
    vllm_handle: VllmHandle, demo_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[str]:
    """A live gateway whose model ``demo`` is the session's vLLM engine."""
    model = {"name": "demo", "backend": "vllm", "path": str(demo_model_path),
             "engine": ENGINE_ARGS, "tool_call_parser": "hermes"}  # fmt: skip
    db = tmp_path_factory.mktemp("gateway-db") / "gw.db"
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{db}",
        models=json.dumps([model]),
        api_keys=f"t:{KEY}",
        sandbox_enabled=False,
    )
    from app.db.migrate import upgrade

    await asyncio.to_thread(upgrade, settings.database_url)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(create_app(settings), log_level="warning", lifespan="on")
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve(sockets=[sock]))
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    async with httpx.AsyncClient(base_url=url) as http:
        for _ in range(600):
            if server.started and (await http.get("/readyz")).status_code == 200:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("gateway not ready")
    yield url
    server.should_exit = True
    await task
    sock.close()
    assert vllm_handle.ready  # the app's shutdown left the shared engine to its other user


@pytest.fixture
async def client(base_url: str) -> AsyncIterator[AsyncOpenAI]:
    async with AsyncOpenAI(base_url=f"{base_url}/v1", api_key=KEY, max_retries=0) as openai:
        yield openai


async def test_openai_client_stream_and_non_stream_agree(client: AsyncOpenAI) -> None:
    whole = await client.chat.completions.create(
        model="demo",
        messages=HELLO,
        max_tokens=20,
        temperature=0,
    )
    assert whole.choices[0].finish_reason == "length"
    assert whole.usage is not None and whole.usage.completion_tokens == 20
    stream = await client.chat.completions.create(
        model="demo", messages=HELLO, max_tokens=20, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )  # fmt: skip
    text, usage = "", None
    async for chunk in stream:
        text += "".join(c.delta.content or "" for c in chunk.choices)
        usage = chunk.usage or usage
    assert text == whole.choices[0].message.content
    assert usage is not None and usage.total_tokens == whole.usage.total_tokens


async def test_openai_client_gets_a_forced_tool_call(client: AsyncOpenAI) -> None:
    params = {"type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
              "required": ["city"], "additionalProperties": False}  # fmt: skip
    tools: Any = [{"type": "function", "function": {"name": "weather", "parameters": params}}]
    out = await client.chat.completions.create(
        model="demo", messages=HELLO, max_tokens=30, temperature=0, tools=tools,
        tool_choice={"type": "function", "function": {"name": "weather"}},
    )  # fmt: skip
    (call,) = out.choices[0].message.tool_calls or []
    assert call.type == "function" and call.function.name == "weather"
    jsonschema.validate(json.loads(call.function.arguments), params)


async def test_an_agent_session_on_the_engine_stores_its_turn(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {KEY}"}
    spec = {
        "kind": "agent",
        "model": "demo",
        "gen_params": {"temperature": 0, "max_new_tokens": 12},
    }
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=60) as http:
        assert (
            await http.post("/v1/agents", json={"name": "bot", "spec": spec})
        ).status_code == 201
        sid = (await http.post("/v1/sessions", json={"agent": "bot"})).json()["id"]
        resp = await http.post(f"/v1/sessions/{sid}/messages", json={"message": "Hello"})
        assert resp.status_code == 200, resp.text
        run, reply = resp.json()["run"], resp.json()["message"]
        memory = (await http.get(f"/v1/sessions/{sid}/memory")).json()
    assert run["status"] == "completed" and reply["content"]
    assert run["usage"]["completion_tokens"] == 12 and run["usage"]["prompt_tokens"] > 0
    stored = memory["memory"]
    assert [m["content"] for m in stored] == ["Hello", reply["content"]]
