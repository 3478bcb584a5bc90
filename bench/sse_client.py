"""A minimal streaming HTTP/1.1 client for many concurrent SSE streams at little CPU.

aiohttp spends ~80 µs of client CPU per received event; on 2 cores that is stolen from the
server under test. This client is an ``asyncio.Protocol`` that only timestamps each read and
looks for ``[DONE]`` and the end of the chunked body: no parsing, no per-event objects.
"""

from __future__ import annotations

import asyncio
import json
import time
from dataclasses import dataclass, field
from typing import Any, cast


@dataclass
class StreamStats:
    """Timestamps of one stream's reads."""

    started: float = 0.0
    reads: list[float] = field(default_factory=list)  # reads that carried SSE data
    status_ok: bool = False
    done: bool = False


class _SSEProtocol(asyncio.Protocol):
    def __init__(self, request: bytes, stats: StreamStats, finished: asyncio.Future[None]) -> None:
        self.request, self.stats, self.finished = request, stats, finished
        self.head = b""
        self.tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, though they behave as one.
        self.transport = cast(asyncio.Transport, transport)
        self.stats.started = time.perf_counter()
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        now = time.perf_counter()
        if len(self.head) < 16:
            self.head += data[: 16 - len(self.head)]
            self.stats.status_ok = self.head.startswith((b"HTTP/1.1 200", b"HTTP/1.0 200"))
        if b"data:" in data:  # not the headers alone, a ping comment or the closing chunk
            self.stats.reads.append(now)
        self.tail = (self.tail + data)[-64:]
        # The chunked body ends with a zero-size chunk; [DONE] is the OpenAI end marker.
        if self.tail.endswith(b"0\r\n\r\n") or not self.stats.status_ok:
            self.stats.done = b"[DONE]" in self.tail
            assert self.transport is not None
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


def build_request(host: str, port: int, path: str, body: dict[str, Any]) -> bytes:
    """The raw HTTP/1.1 POST of a JSON body."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Accept: text/event-stream\r\nContent-Length: {len(payload)}\r\n\r\n"
    )
    return head.encode() + payload


STREAM_TIMEOUT_S = 120.0


async def open_stream(host: str, port: int, request: bytes, delay: float) -> StreamStats:
    """Wait ``delay`` s, send the request, collect read times until the stream ends."""
    await asyncio.sleep(delay)
    loop = asyncio.get_running_loop()
    stats = StreamStats()
    finished: asyncio.Future[None] = loop.create_future()
    transport, _ = await loop.create_connection(
        lambda: _SSEProtocol(request, stats, finished), host, port
    )
    try:
        await asyncio.wait_for(finished, STREAM_TIMEOUT_S)
    finally:
        transport.close()
    return stats
