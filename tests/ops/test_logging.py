"""JSON logs carry the request and run ids on every line; x-request-id is accepted and returned."""

from __future__ import annotations

import asyncio
import io
import json
import logging
from collections.abc import Iterator

import httpx
import pytest
from fastapi import FastAPI

from app.ops.logging import RequestIdMiddleware, bind_run_id, configure_logging, get_request_id

log = logging.getLogger("agentstation.test")


@pytest.fixture
def log_stream() -> Iterator[io.StringIO]:
    stream = io.StringIO()
    root = logging.getLogger()
    before = (list(root.handlers), root.level)
    configure_logging("json", "INFO", stream=stream)
    yield stream
    root.handlers[:] = before[0]
    root.setLevel(before[1])


def lines(stream: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in stream.getvalue().splitlines()]


def make_app() -> FastAPI:
    app = FastAPI()

    @app.post("/v1/sessions/{sid}/messages")
    async def post_message(sid: str) -> dict[str, str | None]:
        log.info("accepted message", extra={"session_id": sid})

        async def run() -> None:
            with bind_run_id("run_42"):
                log.info("run started")
                await asyncio.sleep(0)
                log.warning("run finished")

        await asyncio.create_task(run())
        return {"request_id": get_request_id()}

    app.add_middleware(RequestIdMiddleware, access_log=True)
    return app


async def test_json_lines_carry_request_and_run_ids(log_stream: io.StringIO) -> None:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        response = await c.post("/v1/sessions/s1/messages", headers={"x-request-id": "req-abc.1"})
    assert response.headers["x-request-id"] == "req-abc.1"
    assert response.json() == {"request_id": "req-abc.1"}
    entries = lines(log_stream)
    by_message = {e["message"]: e for e in entries}
    assert by_message["accepted message"]["request_id"] == "req-abc.1"
    assert by_message["accepted message"]["run_id"] is None
    assert by_message["accepted message"]["session_id"] == "s1"
    assert by_message["run started"]["run_id"] == "run_42"
    assert by_message["run started"]["request_id"] == "req-abc.1"
    assert by_message["run finished"]["level"] == "warning"
    access = by_message["POST /v1/sessions/s1/messages 200"]
    assert access["logger"] == "agentstation.access"
    assert access["status"] == 200
    assert access["request_id"] == "req-abc.1"
    assert isinstance(access["duration_ms"], float)
    for entry in entries:
        assert {"ts", "level", "logger", "message", "request_id", "run_id"} <= entry.keys()


async def test_missing_or_unsafe_request_ids_are_replaced(log_stream: io.StringIO) -> None:
    transport = httpx.ASGITransport(app=make_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as c:
        fresh = await c.post("/v1/sessions/s1/messages")
        unsafe = await c.post("/v1/sessions/s1/messages", headers={"x-request-id": 'a b"{}'})
        too_long = await c.post("/v1/sessions/s1/messages", headers={"x-request-id": "x" * 200})
    ids = {r.headers["x-request-id"] for r in (fresh, unsafe, too_long)}
    assert len(ids) == 3
    for rid in ids:
        assert len(rid) == 32 and all(ch in "0123456789abcdef" for ch in rid)
    assert {e["request_id"] for e in lines(log_stream) if e["message"] == "run started"} == ids


def test_lines_outside_requests_have_null_ids_and_exceptions_are_kept(
    log_stream: io.StringIO,
) -> None:
    try:
        raise ValueError("bad thing")
    except ValueError:
        log.exception("failed")
    (entry,) = lines(log_stream)
    assert entry["request_id"] is None and entry["run_id"] is None
    assert entry["level"] == "error"
    assert "ValueError: bad thing" in str(entry["exc_info"])


def test_text_format_also_shows_the_ids(log_stream: io.StringIO) -> None:
    stream = io.StringIO()
    configure_logging("text", "INFO", stream=stream)
    with bind_run_id("run_7"):
        log.info("hello")
    assert "run=run_7" in stream.getvalue() and "hello" in stream.getvalue()
    assert log_stream.getvalue() == ""  # the earlier handler of ours was replaced, not stacked
