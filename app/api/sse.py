"""Run events as server-sent events (``id:`` = seq, ``event:`` = type, ``retry:`` first, pings)."""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from sse_starlette import EventSourceResponse, ServerSentEvent

from app.errors import public_error
from app.runtime.runs import RunManager
from app.settings import Settings

log = logging.getLogger(__name__)
# OpenAPI: endpoints that answer JSON or, with ``stream``, an event stream document both
# (before OpenAPI 3.2 the event-stream ``schema`` describes one event).
SSE_EVENT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "id": {"type": "string"},
        "event": {"type": "string"},
        "data": {"type": "string"},
        "retry": {"type": "integer"},
    },
}
SSE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {"content": {"text/event-stream": {"schema": SSE_EVENT_SCHEMA}}}
}


# Event seqs are 32-bit integers in the database: a larger one names no event yet.
MAX_SEQ = 2**31 - 1


def parse_after(last_event_id: str | None, after: int | None) -> int:
    """The seq to resume after: ``Last-Event-ID`` wins over ``?after=``; junk means 0."""
    for value in (last_event_id, after):
        if value is None:
            continue
        try:
            return min(max(int(value), 0), MAX_SEQ)
        except ValueError:
            continue
    return 0


def run_event_response(
    runs: RunManager,
    run_id: str,
    after: int,
    settings: Settings,
    on_drop: Callable[[], None] | None = None,
    headers: dict[str, str] | None = None,
) -> EventSourceResponse:
    """Replay events after ``after``, then live ones; ``on_drop`` runs if the client leaves."""

    async def events() -> AsyncIterator[ServerSentEvent]:
        finished = False
        retry: int | None = settings.sse_retry_ms
        try:
            async for event in runs.follow(run_id, after):
                yield ServerSentEvent(
                    data=json.dumps(event.data, separators=(",", ":")),
                    event=event.type,
                    id=str(event.seq),
                    retry=retry,
                )
                retry = None
            finished = True
        except Exception as exc:  # headers are sent: report in-stream, then end
            log.exception("event stream of run %s failed", run_id)
            finished = True
            error = public_error(exc)
            if error["code"] == "internal_error":
                error["code"] = "stream_error"
            yield ServerSentEvent(data=json.dumps({"error": error}), event="error")
        finally:
            if not finished and on_drop is not None:
                on_drop()
        if retry is not None:  # nothing was sent: still tell the client how long to wait
            yield ServerSentEvent(comment="end", retry=retry)

    return EventSourceResponse(
        events(),
        ping=settings.sse_ping_s,
        ping_message_factory=lambda: ServerSentEvent(comment="ping"),
        headers=headers,
    )
