"""Streaming scale: concurrent SSE streams at ~20 tokens/s each on one gateway worker.

The scripted model streams a reply word by word with ``chunk_delay_s`` = 0.05 s (20 tokens/s).
At each concurrency level the client (this process, a separate core from the server) opens
that many ``stream: true`` chat completions, spread over the first second, and records the gap
between successive reads of each stream (the first read, TTFT, is kept apart). A level passes
while the p99 gap stays within 2× the nominal 50 ms, every stream completes, and the streams
really ran at once: at least 95 % of them between their first and last event at the same moment
(a server slow to start streams would otherwise pass with fewer of them overlapping). The result
is the largest passing level.

The client runs on uvloop with the garbage collector frozen during a level (a collection over
its per-read timestamps would pause it and be measured as the server's gap); its CPU share is
reported next to the server's so a level limited by the client shows as such.

With ``--baseline DIR`` that tree's gateway (``gateway-old``) runs each level right after
this tree's; the side-by-side rows compare the largest passing level and each level's figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import time
from typing import Any

import uvloop

from bench import plots
from bench.common import (
    HOST,
    OLD,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    compare_row,
    gateway_server,
    pct,
    uvicorn_server,
)
from bench.gateway import GATEWAY_ENV
from bench.sse_client import StreamStats, build_request, open_stream

NAME = "streaming"
DELAY_S = 0.05
WORDS = 80  # 4 s per stream at 20 tokens/s
LEVELS = [50, 100, 250, 500, 750, 1000, 1500, 2000, 2500]  # past the goal: how far each goes
GOAL_STREAMS = 2000  # issue 29
RAMP_S = 1.0
MIN_OVERLAP = 0.95  # share of a level's streams that must be live at the same moment


STREAM_MODEL = [{"name": "stream", "backend": "scripted", "chunk_delay_s": DELAY_S}]


def prompt(words: int) -> str:
    """The user message both targets echo back word by word."""
    return " ".join(f"w{i}" for i in range(words))


def expected_overlap(streams: int, words: int) -> float:
    """Streams live at once if each one started on time (opened evenly over RAMP_S)."""
    duration_s = (words - 1) * DELAY_S
    return streams * min(1.0, duration_s / RAMP_S)


def peak_overlap(stats: list[StreamStats]) -> int:
    """The most streams live (between their first and last event) at the same moment."""
    edges = sorted(
        [(s.reads[0], 1) for s in stats if s.reads] + [(s.reads[-1], -1) for s in stats if s.reads]
    )
    live = peak = 0
    for _, step in edges:
        live += step
        peak = max(peak, live)
    return peak


def measure_level(target: str, server: ServerProcess, streams: int, words: int) -> dict[str, Any]:
    """``run_level`` on a uvloop loop with the client's garbage collector out of the way."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            return runner.run(run_level(target, server, streams, words))
    finally:
        gc.enable()
        gc.unfreeze()


async def run_level(target: str, server: ServerProcess, streams: int, words: int) -> dict[str, Any]:
    """Run ``streams`` concurrent streams; gap and TTFT percentiles in ms, CPU shares in %."""
    content = prompt(words)
    body = {"model": "stream", "stream": True, "messages": [{"role": "user", "content": content}]}
    request = build_request(HOST, server.port, "/v1/chat/completions", body)
    start, cpu0, server_cpu0 = time.perf_counter(), time.process_time(), server.cpu_seconds()
    tasks = [open_stream(HOST, server.port, request, RAMP_S * i / streams) for i in range(streams)]
    results = await asyncio.gather(*tasks, return_exceptions=True)
    wall = time.perf_counter() - start
    client_cpu, server_cpu = time.process_time() - cpu0, server.cpu_seconds() - server_cpu0
    stats = [r for r in results if isinstance(r, StreamStats)]
    gaps = [(b - a) * 1e3 for s in stats for a, b in itertools.pairwise(s.reads)]
    ttfts = [(s.reads[0] - s.started) * 1e3 for s in stats if s.reads]
    return {
        "target": target,
        "streams": streams,
        "completed": sum(1 for s in stats if s.done),
        "gap_p50_ms": round(pct(gaps, 50), 1),
        "gap_p99_ms": round(pct(gaps, 99), 1),
        "gap_max_ms": round(max(gaps, default=0.0), 1),
        "ttft_p50_ms": round(pct(ttfts, 50), 1),
        "ttft_p99_ms": round(pct(ttfts, 99), 1),
        "peak_streams": peak_overlap(stats),
        "events_per_s": round(len(gaps) / wall),
        # Per event sent, start-up of each stream included (80 events per stream).
        "server_us_per_event": round(server_cpu / max(1, len(gaps) + len(ttfts)) * 1e6, 1),
        "server_cpu_pct": round(server_cpu / wall * 100),
        "client_cpu_pct": round(client_cpu / wall * 100),
        "wall_s": round(wall, 1),
    }


def sidebyside(rows: list[dict[str, Any]], best: dict[str, int]) -> list[dict[str, Any]]:
    """Largest passing level (and its ratio to the bare FastAPI's), then per level both
    gateways' gap p99, server CPU per event and TTFT p50: new, old, new/old."""
    new, old = best["gateway"], best["gateway" + OLD]
    out = [compare_row("largest passing level", "streams", new, old)]
    if best["echo"]:
        out.append(
            compare_row("largest passing level", "vs echo", new / best["echo"], old / best["echo"])
        )
    at = {(r["target"], r["streams"]): r for r in rows}
    for (target, level), row in at.items():
        twin = at.get((target + OLD, level))
        if target == "gateway" and twin is not None:
            for fig in ("gap_p99_ms", "server_us_per_event", "ttft_p50_ms"):
                out.append(compare_row(f"{level} streams", fig, row[fig], twin[fig]))
    return out


def run(opts: BenchOptions) -> BenchResult:
    """Raise the number of concurrent streams until the p99 gap passes 2× nominal."""
    result = BenchResult(NAME)
    limit_ms = 2 * DELAY_S * 1e3
    levels = [10] if opts.quick else LEVELS
    words = 10 if opts.quick else WORDS
    best = {"echo": 0, "gateway": 0}
    failed: set[str] = set()
    env = {"BENCH_CHUNK_DELAY_S": str(DELAY_S)}
    with contextlib.ExitStack() as stack:
        echo = stack.enter_context(uvicorn_server("echo", "bench.baselines.echo:app", env=env))
        gw = stack.enter_context(gateway_server("gw-stream", STREAM_MODEL, **GATEWAY_ENV))
        targets = [("echo", echo), ("gateway", gw)]
        if opts.baseline is not None:
            old = gateway_server(
                "gw-stream" + OLD, STREAM_MODEL, None, tree=opts.baseline, **GATEWAY_ENV
            )
            targets.append(("gateway" + OLD, stack.enter_context(old)))
            best["gateway" + OLD] = 0
        for level in levels:
            # Alternate: the bare FastAPI floor, then the gateway(s), at the same level.
            for target, server in targets:
                if target in failed:
                    continue
                row = measure_level(target, server, level, words)
                row["passes"] = (
                    row["gap_p99_ms"] <= limit_ms
                    and row["completed"] == level
                    and row["peak_streams"] >= MIN_OVERLAP * expected_overlap(level, words)
                )
                result.rows.append(row)
                if row["passes"]:
                    best[target] = level
                else:
                    failed.add(target)
            if failed == set(best):
                break
    result.notes.append(
        f"Nominal gap {DELAY_S * 1e3:.0f} ms (20 tokens/s); limit p99 ≤ {limit_ms:.0f} ms; "
        f"{words} tokens per stream; streams opened over {RAMP_S:.0f} s; one uvicorn worker; "
        f"a level also needs ≥ {MIN_OVERLAP:.0%} of its streams live at once (peak_streams). "
        "The client (bench/sse_client.py, one process, uvloop, GC frozen) shares the machine's "
        "cores with the server: client_cpu_pct near 100 would mean the client is the limit."
    )
    if any(r["completed"] < r["streams"] for r in result.rows):
        result.notes.append("Some streams did not complete with [DONE] (completed column).")
    old_level = f", baseline gateway {best['gateway' + OLD]}" if "gateway" + OLD in best else ""
    result.notes.append(
        f"Largest passing level: gateway {best['gateway']}, bare FastAPI {best['echo']}{old_level}."
    )
    if opts.baseline is not None:
        result.sidebyside = sidebyside(result.rows, best)
    met = best["gateway"] >= GOAL_STREAMS
    result.goals.append(
        Goal(
            "concurrent 20 tok/s streams on one worker (p99 gap ≤ 2× nominal)",
            f"≥ {GOAL_STREAMS}",
            f"{best['gateway']}",
            met,
            f"{best['gateway'] - GOAL_STREAMS:+d} streams",
        )
    )
    if not opts.quick and opts.baseline is None:  # a side-by-side run keeps the plain plots
        series = {}
        for target in ("echo", "gateway"):
            rows = [r for r in result.rows if r["target"] == target]
            series[f"{target} p99"] = (
                [r["streams"] for r in rows],
                [r["gap_p99_ms"] for r in rows],
            )
        result.plots.append(
            plots.lines(
                "streaming-gap",
                series,
                "Inter-event gap vs concurrent streams (20 tok/s each)",
                "concurrent streams",
                "ms",
                hline=limit_ms,
            )
        )
    return result
