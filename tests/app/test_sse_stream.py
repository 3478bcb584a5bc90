"""The event stream response (app/api/event_stream.py): headers, pings only when idle, the end
of the stream when the client leaves or the server shuts down (the frames' ``finally`` runs)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx
import pytest
from sse_starlette.sse import AppStatus

from app.api.event_stream import PING, EventStreamResponse, sse_headers
from app.api.sse import DONE, chunk_stream, frame
from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent, make_session
from tests.app.live import live_server


class Client:
    """The ASGI server's side of one request: what the response sent, and a disconnect to give."""

    def __init__(self) -> None:
        self.sent: list[dict[str, Any]] = []
        self.gone = asyncio.Event()

    async def receive(self) -> dict[str, Any]:
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        self.sent.append(message)

    @property
    def body(self) -> list[bytes]:
        return [m["body"] for m in self.sent if m["type"] == "http.response.body"]

    @property
    def ended(self) -> bool:
        return bool(self.sent) and self.sent[-1].get("more_body") is False


SCOPE = {"type": "http", "method": "GET"}


async def test_headers_are_those_of_an_event_stream() -> None:
    async def frames() -> AsyncGenerator[bytes]:
        yield frame(b"{}", event="x", id=1)

    response = EventStreamResponse(frames(), 15.0, sse_headers({"Content-Location": "/v1/runs/r"}))
    assert response.raw_headers == [
        (b"content-location", b"/v1/runs/r"),
        (b"cache-control", b"no-store"),
        (b"connection", b"keep-alive"),
        (b"x-accel-buffering", b"no"),
        (b"content-type", b"text/event-stream; charset=utf-8"),
    ]
    client = Client()
    await response(SCOPE, client.receive, client.send)
    assert client.sent[0]["status"] == 200
    assert client.body == [b"id: 1\nevent: x\ndata: {}\n\n", b""] and client.ended


async def test_pings_only_while_idle() -> None:
    async def frames() -> AsyncGenerator[bytes]:
        yield b"data: first\n\n"
        await asyncio.sleep(0.35)  # idle: about three pings at 0.1 s
        for _ in range(20):  # busy: a frame every 0.02 s, no ping
            yield b"data: busy\n\n"
            await asyncio.sleep(0.02)

    client = Client()
    await EventStreamResponse(frames(), 0.1)(SCOPE, client.receive, client.send)
    body = client.body
    busy = body.index(b"data: busy\n\n")
    assert 2 <= body[:busy].count(PING) <= 4
    assert PING not in body[busy:] and PING == b": ping\n\n"
    assert client.ended


async def test_a_disconnect_ends_the_stream_and_runs_the_frames_finally() -> None:
    dropped = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes]:
        try:
            yield b"data: one\n\n"
            await asyncio.Event().wait()  # a run that never speaks again
            yield b"data: never\n\n"
        finally:
            dropped.set()

    client = Client()
    task = asyncio.create_task(
        EventStreamResponse(frames(), 15.0)(SCOPE, client.receive, client.send)
    )
    await asyncio.sleep(0.05)
    client.gone.set()
    await asyncio.wait_for(task, 1.0)  # returns: no error, no cancelled request task
    assert dropped.is_set()
    assert client.body == [b"data: one\n\n"] and not client.ended  # nobody to end it for


async def test_server_shutdown_ends_the_stream(monkeypatch: pytest.MonkeyPatch) -> None:
    dropped = asyncio.Event()

    async def frames() -> AsyncGenerator[bytes]:
        try:
            yield b"data: one\n\n"
            await asyncio.Event().wait()
        finally:
            dropped.set()

    client = Client()
    task = asyncio.create_task(
        EventStreamResponse(frames(), 15.0)(SCOPE, client.receive, client.send)
    )
    await asyncio.sleep(0.05)
    monkeypatch.setattr(AppStatus, "should_exit", True)  # uvicorn's exit signal, as patched
    started = time.monotonic()
    await asyncio.wait_for(task, 2.0)
    assert time.monotonic() - started < 1.0
    assert dropped.is_set() and client.ended  # the client is still there: the body ends


async def test_shutdown_ends_a_live_stream_and_cancels_its_run(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    """As before the lean response: a shutdown ends the stream like a disconnect would, so an
    ``on_disconnect: cancel`` run is cancelled."""
    with live_server(settings_factory()) as url:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=30) as http:
            await make_agent(http, model="slow")
            sid = await make_session(http)
            body = {"message": "go", "stream": True}
            async with http.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
                run_id = resp.headers["content-location"].rsplit("/", 1)[1]
                lines = resp.aiter_lines()
                while await anext(lines) != "event: message.delta":
                    pass
                monkeypatch.setattr(AppStatus, "should_exit", True)
                started = time.monotonic()
                rest = [line async for line in lines]  # ends cleanly, before the run does
                assert time.monotonic() - started < 1.5
            assert "event: run.completed" not in rest
            monkeypatch.setattr(AppStatus, "should_exit", False)
            for _ in range(100):
                run = (await http.get(f"/v1/runs/{run_id}")).json()
                if run["status"] != "running":
                    break
                await asyncio.sleep(0.05)
    assert run["status"] == "cancelled" and run["stop_reason"] == "client_disconnected"


async def test_a_chat_chunk_stream_outlives_the_shutdown_signal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """OpenAI chunk streams end with their answer (as Starlette's StreamingResponse did), within
    the server's graceful timeout; only run event streams end at the signal."""

    async def chunks() -> AsyncGenerator[dict[str, Any]]:
        yield {"n": 1}
        await asyncio.sleep(0.8)  # past a shutdown poll
        yield {"n": 2}

    response = await chunk_stream(chunks())
    assert response.raw_headers == [
        (b"cache-control", b"no-cache"),
        (b"content-type", b"text/event-stream; charset=utf-8"),
    ]
    client = Client()
    monkeypatch.setattr(AppStatus, "should_exit", True)
    await asyncio.wait_for(response(SCOPE, client.receive, client.send), 3.0)
    assert client.body == [b'data: {"n":1}\n\n', b'data: {"n":2}\n\n', DONE, b""]
