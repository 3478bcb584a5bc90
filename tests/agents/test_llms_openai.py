"""GPTAPI / AsyncGPTAPI against a real HTTP mock OpenAI server on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from agents.llms import (
    GPTAPI,
    APIConnectionError,
    APIError,
    AsyncGPTAPI,
    OpenAIClient,
    Usage,
    usage_scope,
)

USER = [{"role": "user", "content": "hi"}]


@dataclass
class MockOpenAI:
    """Answers chat completions from a queue of scripted behaviours; records every request."""

    plan: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    disconnected: asyncio.Event = field(default_factory=asyncio.Event)
    url: str = ""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.json()
        self.requests.append({"body": body, "headers": dict(request.headers)})
        step: dict[str, Any] = self.plan.pop(0) if self.plan else {"words": ["ok"]}
        if "hang" in step:
            await asyncio.sleep(step["hang"])
        if "status" in step:
            error = {"error": {"message": "nope"}}
            return web.json_response(error, status=step["status"], headers=step.get("headers"))
        words: list[str] = step["words"]
        usage = {"prompt_tokens": 3, "completion_tokens": len(words)}
        if not body.get("stream"):
            message = {"role": "assistant", "content": "".join(words)}
            choice = {"index": 0, "message": message, "finish_reason": "stop"}
            answer = web.json_response({"choices": [choice], "usage": usage})
            if "cookie" in step:  # as providers' edges do (e.g. a bot-management cookie)
                answer.set_cookie("edge", step["cookie"])
            return answer
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for word in words:
                await self._event(resp, {"choices": [{"index": 0, "delta": {"content": word}}]})
                await asyncio.sleep(step.get("delay", 0))
            for call in step.get("tool_calls", []):
                delta = {"tool_calls": [call]}
                await self._event(resp, {"choices": [{"index": 0, "delta": delta}]})
            if "error" in step:
                await self._event(resp, {"error": step["error"]})
            last = {"index": 0, "delta": {}, "finish_reason": step.get("finish", "stop")}
            await self._event(resp, {"choices": [last]})
            if body.get("stream_options", {}).get("include_usage"):
                await self._event(resp, {"choices": [], "usage": usage})
            await resp.write(b"data: [DONE]\n\n")
        except (asyncio.CancelledError, ConnectionResetError):
            self.disconnected.set()
            raise
        return resp

    @staticmethod
    async def _event(resp: web.StreamResponse, data: dict[str, Any]) -> None:
        await resp.write(f"data: {json.dumps(data)}\n\n".encode())


@pytest.fixture
async def server() -> AsyncIterator[MockOpenAI]:
    mock = MockOpenAI()
    app = web.Application()
    app.router.add_post("/v1/chat/completions", mock.handle)
    runner = web.AppRunner(app, handler_cancellation=True)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    mock.url = f"http://127.0.0.1:{runner.addresses[0][1]}/v1"
    yield mock
    await runner.cleanup()


async def test_streams_text_usage_and_maps_params(
    server: MockOpenAI, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "sk-env")
    server.plan = [{"words": ["Hel", "lo ", "世界"]}]
    messages = [{"role": "system", "content": "s"}, *USER, {"role": "environment", "content": "r"}]
    async with AsyncGPTAPI("org/odd-model:7b", base_url=server.url, max_new_tokens=7) as llm:
        with usage_scope() as counter:
            deltas = [d async for d in llm.astream(messages, temperature=0.2, stop_words=["#"])]
    assert [d.text for d in deltas] == ["Hel", "lo ", "世界", ""]
    assert deltas[-1].usage == Usage(3, 3) and deltas[-1].finish_reason == "stop"
    assert counter == Usage(3, 3)
    request = server.requests[0]
    assert request["headers"]["Authorization"] == "Bearer sk-env"
    assert request["body"] == {
        "model": "org/odd-model:7b",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "hi"},
            {"role": "system", "content": "r"},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 7,
        "stop": ["#"],
        "temperature": 0.2,
        "top_p": 0.8,
    }


async def test_per_call_kwargs_do_not_stick_and_extra_body(server: MockOpenAI) -> None:
    llm = AsyncGPTAPI("m", key="sk-arg", base_url=server.url, extra_body={"top_k": 5})
    async with llm:
        await llm.chat(USER, temperature=0.0, max_new_tokens=1, session_id=9)
        await llm.chat(USER)
    first, second = (r["body"] for r in server.requests)
    assert (first["temperature"], first["max_tokens"], first["top_k"]) == (0.0, 1, 5)
    assert "session_id" not in first
    assert (second["temperature"], second["max_tokens"]) == (0.8, 512)
    assert server.requests[0]["headers"]["Authorization"] == "Bearer sk-arg"


async def test_stop_words_apply_even_when_the_server_ignores_them(server: MockOpenAI) -> None:
    server.plan = [{"words": ["The answer", " is<|action", "_end|> junk"]}]
    async with AsyncGPTAPI("m", base_url=server.url, stop_words=["<|action_end|>"]) as llm:
        assert await llm.chat(USER) == "The answer is"
    assert server.requests[0]["body"]["stop"] == ["<|action_end|>"]


async def test_retries_5xx_and_429_with_backoff(server: MockOpenAI) -> None:
    server.plan = [
        {"status": 503},
        {"status": 429, "headers": {"Retry-After": "0"}},
        {"words": ["ok"]},
    ]
    async with AsyncGPTAPI("m", base_url=server.url, retry=3, backoff_s=0.01) as llm:
        assert await llm.chat(USER) == "ok"
    assert len(server.requests) == 3


async def test_gives_up_after_retry_attempts(server: MockOpenAI) -> None:
    server.plan = [{"status": 500}] * 3
    async with AsyncGPTAPI("m", base_url=server.url, retry=2, backoff_s=0.01) as llm:
        with pytest.raises(APIConnectionError, match="failed after 2 attempts") as info:
            await llm.chat(USER)
    assert info.value.status == 500 and len(server.requests) == 2


async def test_client_errors_are_not_retried(server: MockOpenAI) -> None:
    server.plan = [{"status": 400}]
    async with AsyncGPTAPI("m", base_url=server.url, retry=5, backoff_s=0.01) as llm:
        with pytest.raises(APIError, match="HTTP 400") as info:
            await llm.chat(USER)
    assert info.value.status == 400 and len(server.requests) == 1


async def test_connection_refused_is_retried_then_raised() -> None:
    async with AsyncGPTAPI("m", base_url="http://127.0.0.1:9/v1", retry=3, backoff_s=0.01) as llm:
        with pytest.raises(APIConnectionError, match="failed after 3 attempts"):
            await llm.chat(USER)


async def test_error_inside_the_stream(server: MockOpenAI) -> None:
    server.plan = [{"words": ["par"], "error": {"message": "engine died"}}]
    async with AsyncGPTAPI("m", base_url=server.url) as llm:
        with pytest.raises(APIError, match="engine died"):
            await llm.chat(USER)


async def test_stopping_early_closes_the_request(server: MockOpenAI) -> None:
    server.plan = [{"words": ["w "] * 200, "delay": 0.01}]
    async with AsyncGPTAPI("m", base_url=server.url) as llm:
        async for _ in llm.stream_chat(USER):
            break
        await asyncio.wait_for(server.disconnected.wait(), timeout=5)


async def test_cancelling_closes_the_request(server: MockOpenAI) -> None:
    server.plan = [{"words": ["w "] * 200, "delay": 0.01}]
    async with AsyncGPTAPI("m", base_url=server.url) as llm:
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in llm.stream_chat(USER):
                started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.wait_for(server.disconnected.wait(), timeout=5)


async def test_non_streaming_mode(server: MockOpenAI) -> None:
    server.plan = [{"words": ["whole ", "reply"]}]
    async with AsyncGPTAPI("m", base_url=server.url, stream=False) as llm:
        deltas = [d async for d in llm.astream(USER)]
    assert "".join(d.text for d in deltas) == "whole reply"
    assert deltas[-1].usage == Usage(3, 2)
    assert "stream_options" not in server.requests[0]["body"]


async def test_sync_gptapi(server: MockOpenAI) -> None:
    server.plan = [{"words": ["sync ", "ok"]}, {"words": ["a ", "b"]}]
    llm = GPTAPI("m", api_base=server.url + "/chat/completions")
    loop = asyncio.get_running_loop()
    # One worker thread: the sync client keeps its connections on that thread's loop.
    with ThreadPoolExecutor(max_workers=1) as thread:
        assert await loop.run_in_executor(thread, llm.chat, USER) == "sync ok"
        streamed = await loop.run_in_executor(thread, lambda: list(llm.stream_chat(USER)))
        await loop.run_in_executor(thread, llm.close)
        await loop.run_in_executor(thread, _close_thread_loop)
    assert streamed == ["a ", "b"]


def _close_thread_loop() -> None:
    # agents.utils keeps one loop per thread and never closes it; this thread ends here.
    from agents import utils

    utils._loop().close()


async def test_raw_client_relays_requests_for_the_gateway(server: MockOpenAI) -> None:
    server.plan = [{"words": ["a ", "b"]}, {"words": ["whole"]}]
    client = OpenAIClient(server.url, "k", model="upstream-model")
    request = {"model": "alias", "messages": USER, "temperature": 0}
    chunks = [chunk async for chunk in client.stream(request)]
    deltas = [c["choices"][0]["delta"].get("content") for c in chunks]
    assert deltas == ["a ", "b", None] and chunks[-1]["choices"][0]["finish_reason"] == "stop"
    completion = await client.complete(request)
    assert completion["choices"][0]["message"]["content"] == "whole"
    await client.aclose()
    bodies = [r["body"] for r in server.requests]
    assert [(b["model"], b["stream"], b["temperature"]) for b in bodies] == [
        ("upstream-model", True, 0),
        ("upstream-model", False, 0),
    ]


async def test_upstream_cookies_are_never_sent_back(server: MockOpenAI) -> None:
    """One client serves every tenant of a gateway: a cookie one answer sets must not ride
    along on the next request (someone else's, perhaps)."""
    server.plan = [{"words": ["a"], "cookie": "tenant-a"}, {"words": ["b"]}]
    # By name: aiohttp's default jar ignores cookies of hosts given as IP addresses.
    client = OpenAIClient(server.url.replace("127.0.0.1", "localhost"), "k", model="m")
    request = {"model": "m", "messages": USER}
    await client.complete(request)
    await client.complete(request)
    await client.aclose()
    assert [r["headers"].get("Cookie") for r in server.requests] == [None, None]


async def test_read_timeout_is_retried_then_raised(server: MockOpenAI) -> None:
    server.plan = [{"hang": 2, "words": ["late"]}] * 2
    llm = AsyncGPTAPI("m", base_url=server.url, timeout=0.1, retry=2, backoff_s=0.01)
    async with llm:
        with pytest.raises(APIConnectionError, match="failed after 2 attempts"):
            await llm.chat(USER)
    assert len(server.requests) == 2


async def test_native_tool_calls_arrive_in_delta_extra(server: MockOpenAI) -> None:
    call = {"index": 0, "id": "c1", "function": {"name": "Calculator", "arguments": "{}"}}
    server.plan = [{"words": [], "tool_calls": [call], "finish": "tool_calls"}]
    tools = [{"type": "function", "function": {"name": "Calculator", "parameters": {}}}]
    async with AsyncGPTAPI("m", base_url=server.url) as llm:
        deltas = [d async for d in llm.astream(USER, tools=tools, tool_choice="auto")]
    assert deltas[0].extra == {"tool_calls": [call]}
    assert deltas[-1].finish_reason == "tool_calls"
    body = server.requests[0]["body"]
    assert (body["tools"], body["tool_choice"]) == (tools, "auto")
