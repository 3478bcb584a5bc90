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
             "engine": ENGINE_ARGS, "tool_call_parser": "hermes",
             "stream_call_arguments": True}  # fmt: skip
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


async def test_a_session_stream_shows_a_native_call_as_the_model_writes_it(base_url: str) -> None:
    # A forced native call: its arguments reach the session stream as message.delta events
    # (stream_state 3, PLUGIN_START: a tool call being written) before the call's message,
    # so a client sees the step start; text deltas (state 1) carry none of it.
    headers = {"Authorization": f"Bearer {KEY}"}
    force = {"type": "function", "function": {"name": "Calculator"}}
    spec = {
        "kind": "tool_agent",
        "model": "demo",
        "tools": [{"name": "Calculator"}],
        "max_turn": 2,
        "output_format": {"type": "native", "tool_choice": force},
        "gen_params": {"temperature": 0, "max_new_tokens": 48},
    }
    events: list[tuple[str, dict[str, Any]]] = []
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=120) as http:
        created = await http.post("/v1/agents", json={"name": "calc", "spec": spec})
        assert created.status_code == 201, created.text
        sid = (await http.post("/v1/sessions", json={"agent": "calc"})).json()["id"]
        body = {"message": "What is 6 * 7?", "stream": True}
        async with http.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
            assert resp.status_code == 200
            name = ""
            async for line in resp.aiter_lines():
                if line.startswith("event: "):
                    name = line[7:]
                elif line.startswith("data: "):
                    events.append((name, json.loads(line[6:])))
    assert events[-1][0] == "run.completed", events[-1]
    at = next(i for i, (n, d) in enumerate(events) if n == "message" and d["index"] == 0)
    call = events[at][1]
    action = call["message"]["formatted"]["action"]
    assert action["name"] == "Calculator"
    before = [d for n, d in events[:at] if n == "message.delta" and d["index"] == 0]
    written = "".join(d["delta"] for d in before if d["stream_state"] == 3)
    assert not any(d["delta"] for d in before if d["stream_state"] == 1)
    # What streamed is the call's arguments, as the model wrote them.
    if "parameters" in action:
        assert json.loads(written) == action["parameters"]
    else:  # cut off by max_new_tokens: kept as the text written
        assert written == action["arguments"]
    assert call["first_at"] < call["at"]  # the first argument token came before the end
