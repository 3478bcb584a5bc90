"""The event-stream response every SSE stream of the gateway is sent with (run events, OpenAI
chunks): frames from an async iterator, written from the request's own task, a ``: ping`` when
idle, and the end of the stream when the client disconnects or the server shuts down. It
replaced sse-starlette's EventSourceResponse (four tasks per response; bench/README.md, "A lean
SSE response"); sse-starlette's ``AppStatus`` still says when uvicorn is exiting."""

from __future__ import annotations

import asyncio
import logging
import signal
import weakref
from collections.abc import AsyncGenerator

from sse_starlette.sse import AppStatus
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

log = logging.getLogger(__name__)


def sse_headers(headers: dict[str, str] | None = None) -> dict[str, str]:
    """A run event stream's headers (those sse_starlette's EventSourceResponse sent)."""
    fields = dict(headers or {})
    fields.setdefault("Cache-Control", "no-store")
    fields |= {"Connection": "keep-alive", "X-Accel-Buffering": "no"}
    return fields


PING = b": ping\n\n"  # sse.frame(comment="ping")
# How often the shutdown watcher looks at the server's exit flag (as sse_starlette's does).
SHUTDOWN_POLL_S = 0.5


class EventStreamResponse(Response):
    """An event stream: the frames of an async iterator, a ``: ping`` comment when it has been
    idle for ``ping_s`` (0: never), and its end when the client disconnects or (with
    ``end_at_shutdown``) the server shuts down: the iterator is closed where it waits, its
    ``finally`` runs.

    Lean on purpose (issue 13: the SSE response was ~25 % of a streamed turn's event loop
    time): the frames are sent from the request's own task; per response there is one task
    (waiting for ``http.disconnect``) and one timer (the ping), no task group. A disconnect or
    shutdown expires an ``asyncio.timeout`` around the stream, which cancels the task where it
    waits. It replaces sse_starlette's EventSourceResponse (run events, ``sse_headers``) and
    Starlette's StreamingResponse (OpenAI chunks), each a task group of 2–4 tasks."""

    media_type = "text/event-stream"

    def __init__(
        self,
        frames: AsyncGenerator[bytes, None],
        ping_s: float,
        headers: dict[str, str] | None = None,
        *,
        end_at_shutdown: bool = True,
    ) -> None:
        self.frames, self.ping_s, self.end_at_shutdown = frames, ping_s, end_at_shutdown
        self.status_code, self.background = 200, None
        self.init_headers(headers)  # + Content-Type: text/event-stream; charset=utf-8
        self._deadline: asyncio.Timeout | None = None  # expired: the stream ends
        self._shutdown = False
        self._last = 0.0  # loop time of the last frame sent
        self._timer: asyncio.TimerHandle | None = None
        self._pinger: asyncio.Task[None] | None = None
        self._send: Send | None = None  # while the stream is open

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        start = {"type": "http.response.start", "status": 200, "headers": self.raw_headers}
        if scope.get("method") == "HEAD":  # headers only: the stream never starts
            await send(start)
            await send({"type": "http.response.body", "body": b"", "more_body": False})
            return
        loop = asyncio.get_running_loop()
        streams = _open_streams(loop) if self.end_at_shutdown else set()
        try:
            async with asyncio.timeout(None) as deadline:
                self._deadline, self._send = deadline, send
                watcher = loop.create_task(self._watch(receive))
                streams.add(self)
                try:
                    await send(start)
                    self._last = loop.time()
                    if self.ping_s > 0:
                        self._timer = loop.call_at(self._last + self.ping_s, self._ping_due)
                    async for chunk in self.frames:
                        await send({"type": "http.response.body", "body": chunk, "more_body": True})
                        self._last = loop.time()
                    self._stop_pings()
                    if self._pinger is not None:  # a ping on its way goes out before the end
                        await self._pinger
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
                finally:
                    self._send = None
                    self._stop_pings()
                    streams.discard(self)
                    watcher.cancel()
                    await self.frames.aclose()  # stopped at a ``yield``: its ``finally`` runs
        except TimeoutError:
            if not deadline.expired():
                raise
            if self._shutdown:  # the client is still there: end the body as a normal end does
                await send({"type": "http.response.body", "body": b"", "more_body": False})

    def end(self, shutdown: bool = False) -> None:
        """End the stream (the client left, or the server shuts down)."""
        if self._send is None or self._deadline is None or self._deadline.expired():
            return
        self._shutdown = shutdown
        self._deadline.reschedule(-1.0)  # in the past: expires at once

    async def _watch(self, receive: Receive) -> None:
        try:
            while (await receive())["type"] != "http.disconnect":
                pass
        except Exception:  # a receive that fails has no client behind it either
            log.debug("receive failed during an event stream", exc_info=True)
        self.end()

    def _ping_due(self) -> None:
        loop = asyncio.get_running_loop()
        if loop.time() - self._last >= self.ping_s * 0.999 and self._send is not None:
            if self._pinger is None or self._pinger.done():
                self._pinger = loop.create_task(self._ping(self._send))
            self._last = loop.time()
        self._timer = loop.call_at(self._last + self.ping_s, self._ping_due)

    async def _ping(self, send: Send) -> None:
        try:
            await send({"type": "http.response.body", "body": PING, "more_body": True})
        except Exception:  # the connection is gone: as a disconnect
            log.debug("ping failed", exc_info=True)
            self.end()

    def _stop_pings(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None


# Open event streams per event loop, and the one task per loop that ends them at shutdown.
_STREAMS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, set[EventStreamResponse]] = (
    weakref.WeakKeyDictionary()
)
_WATCHERS: set[asyncio.Task[None]] = set()  # held: the loop keeps only weak references


def _open_streams(loop: asyncio.AbstractEventLoop) -> set[EventStreamResponse]:
    streams = _STREAMS.get(loop)
    if streams is None:
        streams = _STREAMS[loop] = set()
        watcher = loop.create_task(_watch_shutdown(loop, streams))
        _WATCHERS.add(watcher)
        watcher.add_done_callback(_WATCHERS.discard)
    return streams


def _exiting() -> bool:
    """Whether the server shuts down, as sse_starlette tells: its ``AppStatus.should_exit``
    (set by uvicorn's exit signal handler, which it patches) or the serving uvicorn's own
    ``should_exit`` (found through the SIGTERM handler, a bound method of the server)."""
    if AppStatus.should_exit:
        return True
    server = getattr(signal.getsignal(signal.SIGTERM), "__self__", None)
    return bool(AppStatus.enable_automatic_graceful_drain and getattr(server, "should_exit", False))


async def _watch_shutdown(
    loop: asyncio.AbstractEventLoop, streams: set[EventStreamResponse]
) -> None:
    """While streams are open, look for the server's shutdown every SHUTDOWN_POLL_S and end
    them all when it comes."""
    try:
        while streams:
            if _exiting():
                for stream in list(streams):
                    stream.end(shutdown=True)
            await asyncio.sleep(SHUTDOWN_POLL_S)
    finally:
        if _STREAMS.get(loop) is streams:
            del _STREAMS[loop]
