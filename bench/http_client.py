"""aiohttp vs httpx as the OpenAI backend's HTTP client, side by side in one run.

A mock OpenAI server (aiohttp.web, its own process on 127.0.0.1) answers chat completions,
streamed (16 SSE chunks + usage + [DONE]) or as one JSON body. Each client keeps 32 requests
in flight for a fixed time; clients alternate (A B C A B C …) and the median round counts.
Rows: requests/s per client and mode, and each client's ratio to httpx.

``python -m bench http_client`` (through the harness) or ``python -m bench.http_client``.
Measured 2026-11-22 07:49 UTC on the shared 2-core dev VM (load average 5-8 from teammates;
Python 3.11.7, aiohttp 3.14.5, httpx 0.28.1), ``python -m bench.http_client --duration 3
--rounds 3``, requests/s at 32 in flight:

    mode    aiohttp  httpx  OpenAIClient  AsyncGPTAPI  aiohttp/httpx
    stream      329     35           208          237           9.3x
    json        320     37           399          381           8.8x

Five runs that morning gave aiohttp/httpx 6.8-13.4x streamed and 6.6-13.0x json (the VM is
shared, so absolute rates move; the ratio stays far above 1). So the OpenAI backend uses
aiohttp. OpenAIClient / AsyncGPTAPI add SSE parsing, JSON per chunk, stop words and usage on
top of raw aiohttp and stay 5-11x httpx.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from collections.abc import Awaitable, Callable
from typing import Any

import aiohttp
import httpx
from aiohttp import web

from bench.common import BenchOptions, BenchResult, Goal, ServerProcess, free_port

NAME = "http_client"
CONCURRENCY = 32
CHUNKS = 16
BODY = {"model": "mock", "messages": [{"role": "user", "content": "hi"}], "max_tokens": CHUNKS}


# -- the mock server (run in its own process) ----------------------------------------------
async def _completions(request: web.Request) -> web.StreamResponse:
    body = await request.json()
    if not body.get("stream"):
        message = {"role": "assistant", "content": "tok " * CHUNKS}
        usage = {"prompt_tokens": 1, "completion_tokens": CHUNKS}
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return web.json_response({"choices": [choice], "usage": usage})
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    chunk = json.dumps({"choices": [{"index": 0, "delta": {"content": "tok "}}]})
    for _ in range(CHUNKS):
        await resp.write(f"data: {chunk}\n\n".encode())
    last = json.dumps({"choices": [], "usage": {"prompt_tokens": 1, "completion_tokens": CHUNKS}})
    await resp.write(f"data: {last}\n\ndata: [DONE]\n\n".encode())
    return resp


async def _healthz(request: web.Request) -> web.Response:
    return web.Response(text="ok")


def serve(port: int) -> None:
    """Serve the mock OpenAI API on 127.0.0.1:port until killed."""
    app = web.Application()
    app.router.add_post("/v1/chat/completions", _completions)
    app.router.add_get("/healthz", _healthz)
    web.run_app(app, host="127.0.0.1", port=port, print=None, access_log=None)


# -- the clients -----------------------------------------------------------------------------
Request = Callable[[bool], Awaitable[None]]


def aiohttp_client(url: str) -> tuple[Request, Callable[[], Awaitable[None]]]:
    session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=100))

    async def request(stream: bool) -> None:
        async with session.post(url, json={**BODY, "stream": stream}) as resp:
            resp.raise_for_status()
            if stream:
                async for _ in resp.content:
                    pass
            else:
                await resp.json()

    return request, session.close


def httpx_client(url: str) -> tuple[Request, Callable[[], Awaitable[None]]]:
    client = httpx.AsyncClient(limits=httpx.Limits(max_connections=100), timeout=60)

    async def request(stream: bool) -> None:
        if stream:
            async with client.stream("POST", url, json={**BODY, "stream": True}) as resp:
                resp.raise_for_status()
                async for _ in resp.aiter_lines():
                    pass
        else:
            (await client.post(url, json={**BODY, "stream": False})).raise_for_status()

    return request, client.aclose


def gptapi_client(url: str) -> tuple[Request, Callable[[], Awaitable[None]]]:
    from agents.llms import AsyncGPTAPI

    streamed = AsyncGPTAPI("mock", key="x", api_base=url)
    whole = AsyncGPTAPI("mock", key="x", api_base=url, stream=False)

    async def request(stream: bool) -> None:
        await (streamed if stream else whole).chat(BODY["messages"])  # type: ignore[arg-type]

    async def close() -> None:
        await streamed.aclose()
        await whole.aclose()

    return request, close


def raw_client(url: str) -> tuple[Request, Callable[[], Awaitable[None]]]:
    from agents.llms import OpenAIClient

    client = OpenAIClient(url=url, key="x")

    async def request(stream: bool) -> None:
        if stream:
            async for _ in client.stream(BODY):
                pass
        else:
            await client.complete(BODY)

    return request, client.aclose


CLIENTS = {
    "aiohttp": aiohttp_client,
    "httpx": httpx_client,
    "OpenAIClient": raw_client,
    "AsyncGPTAPI": gptapi_client,
}


async def _load(request: Request, stream: bool, seconds: float) -> tuple[float, int]:
    """(requests/s, errors) with CONCURRENCY requests in flight for ``seconds``."""
    done = errors = 0
    deadline = time.perf_counter() + seconds

    async def worker() -> None:
        nonlocal done, errors
        while time.perf_counter() < deadline:
            try:
                await request(stream)
                done += 1
            except Exception:  # counted, and reported in the row
                errors += 1

    start = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(CONCURRENCY)))
    return done / (time.perf_counter() - start), errors


async def measure(url: str, seconds: float, rounds: int) -> list[dict[str, Any]]:
    """Rows per (mode, client): median requests/s over alternating rounds, ratio to httpx."""
    rows: list[dict[str, Any]] = []
    made = {name: make(url) for name, make in CLIENTS.items()}
    try:
        for stream in (True, False):
            rates: dict[str, list[float]] = {name: [] for name in made}
            errors = dict.fromkeys(made, 0)
            for request, _ in made.values():  # warm up: connections, imports
                await _load(request, stream, min(0.5, seconds))
            for _ in range(rounds):
                for name, (request, _) in made.items():
                    rate, errs = await _load(request, stream, seconds)
                    rates[name].append(rate)
                    errors[name] += errs
            base = statistics.median(rates["httpx"])
            for name, values in rates.items():
                rps = statistics.median(values)
                rows.append(
                    {
                        "mode": "stream" if stream else "json",
                        "client": name,
                        "concurrency": CONCURRENCY,
                        "rps": rps,
                        "vs_httpx": rps / base if base else 0.0,
                        "errors": errors[name],
                    }
                )
    finally:
        for _, close in made.values():
            await close()
    return rows


def run(opts: BenchOptions) -> BenchResult:
    """Start the mock server, measure the three clients, report rows and the goal."""
    port = free_port()
    cmd = [sys.executable, "-m", "bench.http_client", "--serve", str(port)]
    result = BenchResult(NAME)
    with ServerProcess("mock-openai-aiohttp", cmd, port):
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        result.rows = asyncio.run(measure(url, opts.dur(), opts.rounds))
    streamed = {r["client"]: r for r in result.rows if r["mode"] == "stream"}
    ratio = streamed["aiohttp"]["vs_httpx"]
    result.goals = [
        Goal(
            "aiohttp faster than httpx for the OpenAI backend (32 concurrent streams)",
            "> 1x httpx",
            f"{ratio:.1f}x httpx",
            ratio > 1.0,
        )
    ]
    result.notes.append(
        "mock OpenAI server: aiohttp.web in its own process; each client 32 requests in "
        f"flight, {opts.dur():.1f} s per round, {opts.rounds} alternating rounds, median"
    )
    return result


def main() -> None:
    """``python -m bench.http_client [--serve PORT] [--duration S] [--rounds N]``."""
    parser = argparse.ArgumentParser(prog="python -m bench.http_client", description=__doc__)
    parser.add_argument("--serve", type=int, help="only serve the mock on this port")
    parser.add_argument("--duration", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if args.serve:
        serve(args.serve)
        return
    from bench.report import render

    print(render(run(BenchOptions(duration_s=args.duration, rounds=args.rounds))))


if __name__ == "__main__":
    main()
