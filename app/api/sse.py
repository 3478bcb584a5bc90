"""Server-sent events: the one writer of SSE frames (``frame``, ``data_frame``), and run events
as an event stream (``id:`` = seq, ``event:`` = type, ``retry:`` first, pings).

Every event the gateway streams is written here: run events (``run_event_response``, also
behind A2A's and the OpenAI front door's session streams) and OpenAI chat-completion chunks
(``data_frame``, ``DONE``). Data is compact JSON on one line (JSON never holds a raw newline).
"""

from __future__ import annotations

import logging
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from typing import Any

from agents.llms.openai_client import APIConnectionError
from app.api.event_stream import EventStreamResponse, sse_headers
from app.engines.base import EngineError
from app.errors import AppError, public_error
from app.models.encoded import dumps, encoded
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


#: The OpenAI stream's last frame.
DONE = b"data: [DONE]\n\n"


def frame(
    data: bytes | None = None,
    *,
    event: str | None = None,
    id: int | None = None,
    retry: int | None = None,
    comment: str | None = None,
) -> bytes:
    """One SSE frame; ``data`` is one line (compact JSON), ``comment`` too."""
    parts: list[bytes] = []
    if comment is not None:
        parts.append(b": %s\n" % comment.encode())
    if id is not None:
        parts.append(b"id: %d\n" % id)
    if event is not None:
        parts.append(b"event: %s\n" % event.encode())
    if data is not None:
        parts.append(b"data: %s\n" % data)
    if retry is not None:
        parts.append(b"retry: %d\n" % retry)
    parts.append(b"\n")
    return b"".join(parts)


_EVENT_HEADS: dict[str, bytes] = {}  # ``event:`` line + ``data:`` field name, by event type


def event_frame(event: str, data: bytes) -> bytes:
    """``frame(data, event=event)``, byte for byte, with the head of each event type encoded
    once (a streamed Response writes one per stream event: issue 25)."""
    head = _EVENT_HEADS.get(event)
    if head is None:
        head = _EVENT_HEADS[event] = b"event: %s\ndata: " % event.encode()
    return head + data + b"\n\n"


def data_frame(obj: dict[str, Any]) -> bytes:
    """A ``data:``-only frame of a JSON object (an OpenAI chunk; an ``EncodedJSON`` is sent as
    its bytes, not re-encoded)."""
    return b"data: " + encoded(obj) + b"\n\n"


async def chunk_stream(chunks: AsyncIterator[dict[str, Any]]) -> EventStreamResponse:
    """An OpenAI chat-completion stream: ``data:`` frames then ``[DONE]``; an error before the
    first chunk is an HTTP error, after it an ``error`` frame."""
    try:
        first = await anext(chunks)
    except StopAsyncIteration:
        first = None

    async def body() -> AsyncGenerator[bytes, None]:
        try:
            if first is not None:
                yield data_frame(first)
            async for chunk in chunks:
                yield data_frame(chunk)
        except Exception as exc:  # headers are sent: report in-stream
            yield data_frame({"error": _stream_error(exc)})
        yield DONE

    # No pings; it ends with its answer at shutdown (the server's graceful timeout).
    return EventStreamResponse(body(), 0, {"Cache-Control": "no-cache"}, end_at_shutdown=False)


def _stream_error(exc: Exception) -> dict[str, Any]:
    if not isinstance(exc, AppError | EngineError | APIConnectionError):
        log.exception("chat completion stream failed", exc_info=exc)
    return public_error(exc)


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
) -> EventStreamResponse:
    """Replay events after ``after``, then live ones; ``on_drop`` runs if the client leaves."""

    async def events() -> AsyncGenerator[bytes, None]:
        finished = False
        retry: int | None = settings.sse_retry_ms
        try:
            async for event in runs.follow(run_id, after):
                yield frame(event.encoded(), event=event.type, id=event.seq, retry=retry)
                retry = None
            finished = True
        except Exception as exc:  # headers are sent: report in-stream, then end
            log.exception("event stream of run %s failed", run_id)
            finished = True
            error = public_error(exc)
            if error["code"] == "internal_error":
                error["code"] = "stream_error"
            yield frame(dumps({"error": error}), event="error")
        finally:
            if not finished and on_drop is not None:
                on_drop()
        if retry is not None:  # nothing was sent: still tell the client how long to wait
            yield frame(comment="end", retry=retry)

    return EventStreamResponse(events(), settings.sse_ping_s, sse_headers(headers))
