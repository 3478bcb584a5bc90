"""The floor for one upstream hop: a minimal FastAPI + aiohttp forwarder.

``BENCH_UPSTREAM=http://127.0.0.1:PORT uvicorn bench.baselines.forwarder:app`` — POST
/v1/chat/completions forwards the body unchanged over one shared aiohttp session and returns the
upstream's answer (streamed through when the upstream streams).
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
from fastapi import FastAPI, Request, Response
from fastapi.responses import StreamingResponse


@asynccontextmanager
async def lifespan(app: FastAPI) -> AsyncIterator[None]:
    """One keep-alive client session for the process."""
    connector = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(os.environ["BENCH_UPSTREAM"], connector=connector) as http:
        app.state.http = http
        yield


app = FastAPI(lifespan=lifespan)


@app.get("/healthz")
async def healthz() -> dict[str, str]:
    """Readiness for the harness."""
    return {"status": "ok"}


@app.post("/v1/chat/completions")
async def forward(request: Request) -> Response:
    """Send the body upstream; relay status, content type and body."""
    http: aiohttp.ClientSession = request.app.state.http
    body = await request.body()
    headers = {"content-type": "application/json", "authorization": "Bearer bench"}
    resp = await http.post("/v1/chat/completions", data=body, headers=headers)
    ctype = resp.headers.get("content-type", "application/json")
    if ctype.startswith("text/event-stream"):

        async def relay() -> AsyncIterator[bytes]:
            async with resp:
                async for chunk in resp.content.iter_any():
                    yield chunk

        return StreamingResponse(relay(), status_code=resp.status, media_type=ctype)
    async with resp:
        content = await resp.read()
    return Response(content, status_code=resp.status, media_type=ctype)
