"""The floor for a Python gateway: bare FastAPI validating a chat request and echoing it.

``uvicorn bench.baselines.echo:app`` — POST /v1/chat/completions validates the body as the
gateway does (its ``ChatCompletionRequest``, declared as the route's body: FastAPI parses and
validates it) and answers a ``chat.completion`` whose content is the last user message (what
the scripted model does without replies), with word-count usage, so the response has the same
shape and size as the gateway's. With
``"stream": true`` it streams the words as ``chat.completion.chunk`` events, pausing
``BENCH_CHUNK_DELAY_S`` (default 0.05) between them, as the scripted model does.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI
from fastapi.responses import StreamingResponse

from app.schemas.openai import ChatCompletionRequest

CHUNK_DELAY_S = float(os.environ.get("BENCH_CHUNK_DELAY_S", "0.05"))


# The gateway's own request model: the echo validates the same request, field for field
# (strict types, bounds, per-role message rules), as a declared FastAPI body.
ChatRequest = ChatCompletionRequest


app = FastAPI()


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    """Readiness for the harness."""
    return {"status": "ok"}


async def _chunks(model: str, content: str) -> AsyncIterator[bytes]:
    base = {"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion.chunk",
            "created": int(time.time()), "model": model}  # fmt: skip
    for i, word in enumerate(re.findall(r"\S+\s*", content)):
        if i:
            await asyncio.sleep(CHUNK_DELAY_S)
        delta = {"role": "assistant", "content": word} if i == 0 else {"content": word}
        event = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]}
        yield b"data: " + json.dumps(event).encode() + b"\n\n"
    last = {**base, "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
    yield b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n"


@app.post("/v1/chat/completions", response_model=None)
async def chat(req: ChatRequest) -> dict[str, Any] | StreamingResponse:
    """Echo the last user message as a chat.completion (or its chunks)."""
    text = next((m.content for m in reversed(req.messages) if m.role == "user"), "")
    content = text if isinstance(text, str) else ""
    if req.stream:
        return StreamingResponse(_chunks(req.model, content), media_type="text/event-stream")
    prompt = sum(len(str(m.content or "").split()) for m in req.messages)
    completion = len(content.split())
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": req.model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": None,
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
