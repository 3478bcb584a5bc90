"""Streamed session turns: concurrent SSE streams of ``POST /v1/sessions/{id}/messages`` at
20 tokens/s each on one gateway worker, on SQLite and PostgreSQL (the path whose event ids are
reserved durably, issue 18; ``streaming`` measures the stateless chat path).

Each stream is one turn of its own session (an echo agent on the scripted model, 80 words at
50 ms); the run's events are stored as it streams. Reported per level: the gap between reads
(p50/p99), time to the first read, server CPU per event read, and whether every stream ended.
``--words 400`` makes each run need more than its first block of event ids.

Run: ``python -m bench.session_streams [--db sqlite postgres] [--levels 50 200] [--words 80]``
(prints one JSON row per level). To compare two trees, run it once with each on PYTHONPATH.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import itertools
import json
import time
from typing import Any

import uvloop

from bench.common import HOST, ServerProcess, gateway_server, http_json, pct, reset_postgres_db
from bench.gateway import GATEWAY_ENV
from bench.sse_client import StreamStats, build_request, open_stream
from bench.streaming import DELAY_S, RAMP_S, STREAM_MODEL, prompt

AGENT_SPEC = {"kind": "agent", "model": "stream"}


async def run_level(server: ServerProcess, sessions: list[str], words: int) -> dict[str, Any]:
    """One streamed turn on each session at once (opened over RAMP_S)."""
    body = {"message": prompt(words), "stream": True}
    requests = [
        build_request(HOST, server.port, f"/v1/sessions/{sid}/messages", body) for sid in sessions
    ]
    start, server_cpu0 = time.perf_counter(), server.cpu_seconds()
    n = len(requests)
    tasks = [open_stream(HOST, server.port, r, RAMP_S * i / n) for i, r in enumerate(requests)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall, server_cpu = time.perf_counter() - start, server.cpu_seconds() - server_cpu0
    stats = [r for r in results if isinstance(r, StreamStats)]
    gaps = [(b - a) * 1e3 for s in stats for a, b in itertools.pairwise(s.reads)]
    ttfts = [(s.reads[0] - s.started) * 1e3 for s in stats if s.reads]
    return {
        "streams": n,
        "completed": sum(1 for s in stats if s.status_ok and s.reads),
        "gap_p50_ms": round(pct(gaps, 50), 1),
        "gap_p99_ms": round(pct(gaps, 99), 1),
        "ttft_p50_ms": round(pct(ttfts, 50), 1),
        "ttft_p99_ms": round(pct(ttfts, 99), 1),
        "server_us_per_read": round(server_cpu / max(1, len(gaps) + len(ttfts)) * 1e6, 1),
        "wall_s": round(wall, 1),
    }


def measure(server: ServerProcess, sessions: list[str], words: int) -> dict[str, Any]:
    """``run_level`` on uvloop with the client's garbage collector out of the way."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run_level(server, sessions, words))
    finally:
        gc.enable()
        gc.unfreeze()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--levels", nargs="+", type=int, default=[50, 200])
    parser.add_argument("--words", type=int, default=80)
    args = parser.parse_args(argv)
    for db in args.db:
        url = reset_postgres_db("agentstation_bench_sessions") if db == "postgres" else None
        with gateway_server(f"gw-sessions-{db}", STREAM_MODEL, url, **GATEWAY_ENV) as gw:
            http_json("POST", f"{gw.base_url}/v1/agents", {"name": "a", "spec": AGENT_SPEC})
            for level in args.levels:
                sessions = [
                    str(http_json("POST", f"{gw.base_url}/v1/sessions", {"agent": "a"})["id"])
                    for _ in range(level)
                ]
                row = {"db": db, "words": args.words, **measure(gw, sessions, args.words)}
                print(json.dumps(row), flush=True)
    print(f"# nominal gap {DELAY_S * 1e3:.0f} ms; one uvicorn worker", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
