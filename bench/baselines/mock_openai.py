"""A mock OpenAI server as cheap as possible: a bare ASGI app, no framework.

``uvicorn bench.baselines.mock_openai:app`` — POST /v1/chat/completions answers a fixed
``chat.completion`` (or, with ``"stream": true``, a few ``chat.completion.chunk`` SSE events
then ``[DONE]``); GET /v1/models lists one model. Every proxy under test talks to this same
upstream, so its cost is shared equally.
"""

from __future__ import annotations

import json
import time
from collections.abc import Awaitable, Callable
from typing import Any

Scope = dict[str, Any]
Receive = Callable[[], Awaitable[dict[str, Any]]]
Send = Callable[[dict[str, Any]], Awaitable[None]]

REPLY = "hello from the mock upstream"


def _completion(model: str) -> bytes:
    return json.dumps(
        {
            "id": "chatcmpl-mock",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": REPLY},
                    "finish_reason": "stop",
                    "logprobs": None,
                }
            ],
            "usage": {"prompt_tokens": 5, "completion_tokens": 5, "total_tokens": 10},
        }
    ).encode()


def _chunks(model: str) -> list[bytes]:
    base = {"id": "chatcmpl-mock", "object": "chat.completion.chunk", "created": 0, "model": model}
    events = []
    for i, word in enumerate(REPLY.split(" ")):
        delta = {"role": "assistant", "content": word} if i == 0 else {"content": " " + word}
        choice = {"index": 0, "delta": delta, "finish_reason": None}
        events.append({**base, "choices": [choice]})
    events.append({**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
    out = [b"data: " + json.dumps(e).encode() + b"\n\n" for e in events]
    return [*out, b"data: [DONE]\n\n"]


async def _read_body(receive: Receive) -> bytes:
    body = b""
    while True:
        msg = await receive()
        chunk: bytes = msg.get("body", b"")
        body += chunk
        if not msg.get("more_body"):
            return body


async def _respond(send: Send, status: int, body: bytes, ctype: bytes) -> None:
    headers = [(b"content-type", ctype), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


async def app(scope: Scope, receive: Receive, send: Send) -> None:
    """The whole mock: chat completions (plain or streamed), models, health."""
    if scope["type"] != "http":
        return
    path, method = scope["path"], scope["method"]
    if method == "POST" and path.endswith("/chat/completions"):
        try:
            request = json.loads(await _read_body(receive))
        except ValueError:
            await _respond(send, 400, b'{"error":{"message":"bad json"}}', b"application/json")
            return
        model = str(request.get("model", "mock"))
        if not request.get("stream"):
            await _respond(send, 200, _completion(model), b"application/json")
            return
        start = {"type": "http.response.start", "status": 200}
        await send({**start, "headers": [(b"content-type", b"text/event-stream")]})
        for chunk in _chunks(model):
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
        await send({"type": "http.response.body", "body": b""})
    elif path.endswith("/models"):
        data = {"object": "list", "data": [{"id": "mock", "object": "model", "owned_by": "bench"}]}
        await _respond(send, 200, json.dumps(data).encode(), b"application/json")
    elif path == "/healthz":
        await _respond(send, 200, b"ok", b"text/plain")
    else:
        await _respond(send, 404, b'{"error":{"message":"not found"}}', b"application/json")
