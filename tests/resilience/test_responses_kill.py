"""SIGKILL the service while a background response streams, restart it on the same database
(SQLite and PostgreSQL): the response is ``failed`` with a reason (not stuck ``in_progress``),
and a stream resumed with ``starting_after`` (the last number the client saw) ends with its
terminal event, numbered above everything sent before the crash. Every body and event
validates against the ``openai`` package's models.

The services run ``agentstation serve`` from the environment: run with ``PYTHONPATH=$PWD`` to
test a worktree's code rather than the installed checkout's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.responses import Response, ResponseStreamEvent
from pydantic import TypeAdapter

from tests.app.conftest import MODELS, parse_sse
from tests.resilience.procs import Service, wait_until

pytestmark = [pytest.mark.slow, pytest.mark.live]
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
CRAWL = {
    "name": "crawl",
    "backend": "scripted",
    "replies": [" ".join(f"word{i}" for i in range(40))],
    "chunk_delay_s": 0.05,
}


def stream_and_kill(service: Service) -> tuple[str, list[dict[str, Any]]]:
    """A background streamed response, SIGKILLed after a few text deltas; (id, events seen)."""
    seen: list[dict[str, Any]] = []
    body = {"model": "crawl", "input": "go", "background": True, "stream": True}
    with service.client(timeout=30) as c, c.stream("POST", "/v1/responses", json=body) as resp:
        assert resp.status_code == 200, resp.read()
        assert resp.headers["X-Session-Id"].startswith("chain_")
        for line in resp.iter_lines():
            if line.startswith("data:"):
                event = json.loads(line.removeprefix("data:"))
                EVENTS.validate_python(event)
                seen.append(event)
                if sum(e["type"] == "response.output_text.delta" for e in seen) >= 3:
                    service.kill()
                    break
        else:
            raise AssertionError(f"the stream ended before the kill: {seen}")
    return seen[0]["response"]["id"], seen


def kill_and_restart(url: str, tmp_path: Path, reasons: tuple[str, ...]) -> None:
    """Stream, SIGKILL, start a new process on the same database: the response ends failed
    with one of ``reasons`` in its error, its resumed stream ends with its terminal event."""
    models = [*MODELS, CRAWL]
    service = Service(url, tmp_path, models).start()
    try:
        response_id, seen = stream_and_kill(service)
        service = Service(url, tmp_path, models).start()  # recovers the run
        with service.client(timeout=30) as c:

            def ended() -> dict[str, Any] | None:
                body = c.get(f"/v1/responses/{response_id}")
                assert body.status_code == 200, body.text
                found: dict[str, Any] = body.json()
                return found if found["status"] not in ("queued", "in_progress") else None

            response = Response.model_validate(wait_until(ended, 30, "the response's end"))
            assert response.status == "failed", response.status
            assert response.error is not None
            assert any(reason in response.error.message for reason in reasons), response.error
            last = seen[-1]["sequence_number"]
            resumed = c.get(
                f"/v1/responses/{response_id}",
                params={"stream": "true", "starting_after": last},
            )
            assert resumed.status_code == 200, resumed.text
            events = [f["data"] for f in parse_sse(resumed.text) if "data" in f]
            for event in events:
                EVENTS.validate_python(event)
            numbers = [e["sequence_number"] for e in events]
            assert numbers and numbers[0] > last and numbers == sorted(set(numbers))
            assert events[-1]["type"] == "response.failed"
            assert events[-1]["response"]["status"] == "failed"
            # The session takes the next response of the chain.
            more = c.post(
                "/v1/responses",
                json={"model": "echo", "input": "again", "previous_response_id": response_id},
            )
            assert more.status_code == 200 and more.json()["status"] == "completed", more.text
    finally:
        service.stop()


def test_sigkill_during_a_background_stream_then_restart(tmp_path: Path) -> None:
    kill_and_restart(f"sqlite+aiosqlite:///{tmp_path}/kill.db", tmp_path, ("restarted",))


@pytest.mark.postgres
def test_sigkill_during_a_background_stream_then_restart_postgres(
    shared_pg_url: str, tmp_path: Path
) -> None:
    """On PostgreSQL the new process finds the run's replica dead (its connections went with
    it) or recovers it at its start: either reason is the response's error."""
    kill_and_restart(shared_pg_url, tmp_path, ("restarted", "stopped answering"))
