"""A local OTLP/HTTP trace receiver as cheap as possible: a bare ASGI app, no framework.

``uvicorn bench.baselines.otlp_sink:app`` — ``POST /v1/traces`` reads the body and answers 200
with an empty ``ExportTraceServiceResponse`` (zero bytes of protobuf); ``GET /stats`` tells how
many export requests and bytes it received (the traced gateway's batches really left).
``GET /healthz`` is 200. The tracing benchmark's "local collector" (bench/tracing.py).
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

STATS = {"requests": 0, "bytes": 0}


async def _answer(send: Send, status: int, body: bytes, kind: bytes) -> None:
    headers = [(b"content-type", kind), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The receiver."""
    if scope["type"] != "http":
        return
    if scope["method"] == "POST" and scope["path"] == "/v1/traces":
        size, more = 0, True
        while more:
            message = await receive()
            size += len(message.get("body", b""))
            more = message.get("more_body", False)
        STATS["requests"] += 1
        STATS["bytes"] += size
        await _answer(send, 200, b"", b"application/x-protobuf")
    elif scope["path"] == "/stats":
        await _answer(send, 200, json.dumps(STATS).encode(), b"application/json")
    elif scope["path"] == "/healthz":
        await _answer(send, 200, b"ok", b"text/plain")
    else:
        await _answer(send, 404, b"", b"text/plain")
