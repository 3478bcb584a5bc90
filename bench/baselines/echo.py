"""The floor for a Python gateway: bare FastAPI validating a chat request and echoing it.

``uvicorn bench.baselines.echo:app`` — POST /v1/chat/completions answers a ``chat.completion``
whose content is the last user message (what the scripted model does without replies), with
word-count usage, so the response has the same shape and size as the gateway's. With
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
from typing import Any, Literal

from fastapi import FastAPI
from fastapi.responses import StreamingResponse
from pydantic import BaseModel, ConfigDict

CHUNK_DELAY_S = float(os.environ.get("BENCH_CHUNK_DELAY_S", "0.05"))


class ChatMessage(BaseModel):
    """One OpenAI chat message (unknown fields ignored, as the gateway does)."""

    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[dict[str, Any]] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None


class ChatRequest(BaseModel):
    """The OpenAI chat completion request fields a gateway validates."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[ChatMessage]
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    stop: str | list[str] | None = None
    stream: bool = False
    n: int = 1
    seed: int | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: dict[str, Any] | None = None
    user: str | None = None


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
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
    }
