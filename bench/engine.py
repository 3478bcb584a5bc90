"""The demo model through the gateway vs vLLM's own OpenAI server, under the same load.

Both servers run the same engine settings (bf16, eager, 64 MiB KV cache, prefix caching,
seed 0) on the same locally built demo model, side by side; rounds alternate between them
so machine noise hits both. Each request streams a greedy answer (at most 64 tokens) to a
distinct prompt; greedy output is the same on both servers, so both do the same work (the
token counts are checked). Per concurrency (1, 8, 32): output tokens/s over the wall time
of the round, TTFT (time to the first content chunk) p50/p99 and the gap between content
chunks p50/p99. Rows give gateway/vLLM ratios; results go to bench/results/engine.json.
With ``--baseline DIR`` that tree's gateway (``old_*`` columns) runs in the same rounds,
after this one's, and the side-by-side rows compare each ratio to vLLM, new against old.

``python -m bench engine`` (through the harness) or ``python -m bench.engine``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp

from bench import plots
from bench.common import (
    OLD,
    RESULTS_DIR,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    Skip,
    baseline_tree,
    compare_row,
    free_port,
    gateway_server,
)
from bench.load import wait_idle

NAME = "engine"
CONCURRENCY = (1, 8, 32)
MAX_TOKENS = 64
MAX_MODEL_LEN = 2048
ENGINE = {"dtype": "bfloat16", "enforce_eager": True, "seed": 0, "max_model_len": MAX_MODEL_LEN}
KV_CACHE_BYTES = 64 * 2**20
# Both servers: no usage stats, model in the engine-core process (as AsyncVllmModel sets).
ENGINE_ENV = {
    "VLLM_NO_USAGE_STATS": "1",
    "HF_HUB_OFFLINE": "1",
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
}
START_TIMEOUT_S = 300.0
# The goals: ≥ 0.97× vLLM's own server in output tokens/s, TTFT added ≤ 2 ms p50.
GOAL_TOK_S_RATIO = 0.97
GOAL_TTFT_ADDED_MS = 2.0


def vllm_server(model_dir: Path, max_model_len: int = MAX_MODEL_LEN) -> ServerProcess:
    """``python -m vllm.entrypoints.openai.api_server`` with the gateway's engine settings."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    cmd += ["--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port)]
    cmd += [
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        "--seed",
        "0",
        "--max-model-len",
        str(max_model_len),
    ]
    cmd += ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES), "--enable-prefix-caching"]
    cmd += ["--disable-log-stats", "--disable-uvicorn-access-log"]
    server = ServerProcess("vllm", cmd, port, env=ENGINE_ENV, ready_path="/health")
    server.ready_timeout_s = START_TIMEOUT_S
    return server


def gateway(model_dir: Path, tree: Path | None = None) -> ServerProcess:
    """``agentstation serve`` with the demo model as a raw vLLM model (``tree``: a baseline
    checkout's)."""
    model = {"name": "demo", "backend": "vllm", "path": str(model_dir), "engine": ENGINE}
    name = "gateway" if tree is None else "gateway" + OLD
    server = gateway_server(name, [model], None, tree=tree, **ENGINE_ENV)
    server.ready_timeout_s = START_TIMEOUT_S
    return server


async def one_stream(
    http: aiohttp.ClientSession, url: str, i: int
) -> tuple[float, int, list[float]]:
    """(TTFT s, completion tokens, gaps s between content chunks) of one streamed answer."""
    body = {
        "model": "demo",
        "messages": [{"role": "user", "content": f"Request {i}: tell me a story."}],
        "max_tokens": MAX_TOKENS, "temperature": 0, "stream": True,
        "stream_options": {"include_usage": True},
    }  # fmt: skip
    start = time.perf_counter()
    ttft, tokens, last, gaps = 0.0, 0, 0.0, []
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.strip()
            if not line.startswith(b"data: ") or line == b"data: [DONE]":
                continue
            chunk = json.loads(line[6:])
            if any(c["delta"].get("content") for c in chunk.get("choices", [])):
                now = time.perf_counter()
                if ttft:
                    gaps.append(now - last)
                else:
                    ttft = now - start
                last = now
            if chunk.get("usage"):
                tokens = int(chunk["usage"]["completion_tokens"])
    return ttft, tokens, gaps


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(len(ordered) * q))] if ordered else 0.0


async def load_round(url: str, concurrency: int, per_worker: int) -> dict[str, float]:
    """``concurrency`` workers, ``per_worker`` requests each: tokens/s and TTFT p50."""
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        await one_stream(http, url, -1)  # warm the connection and the engine

        async def worker(w: int) -> list[tuple[float, int, list[float]]]:
            return [await one_stream(http, url, w * per_worker + k) for k in range(per_worker)]

        start = time.perf_counter()
        results = [r for rs in await asyncio.gather(*map(worker, range(concurrency))) for r in rs]
        wall = time.perf_counter() - start
    tokens = sum(t for _, t, _ in results)
    ttfts = [t for t, _, _ in results]
    gaps = [g for _, _, gs in results for g in gs]
    return {
        "tok_s": tokens / wall,
        "ttft_p50_ms": 1000 * statistics.median(ttfts),
        "ttft_p99_ms": 1000 * _pct(ttfts, 0.99),
        "gap_p50_ms": 1000 * _pct(gaps, 0.5),
        "gap_p99_ms": 1000 * _pct(gaps, 0.99),
        "tokens": tokens,
    }


def measure(targets: dict[str, str], rounds: int, per_worker: int) -> list[dict[str, Any]]:
    """Rows per concurrency: each target's best-round figures and the gateway/vLLM ratios."""
    rows = []
    for c in CONCURRENCY:
        best: dict[str, dict[str, float]] = {}
        for _ in range(rounds):
            for name, url in targets.items():  # alternate: A B A B
                got = asyncio.run(load_round(url, c, per_worker))
                if name not in best or got["tok_s"] > best[name]["tok_s"]:
                    best[name] = got
        gw, vl = best["gateway"], best["vllm"]
        if gw["tokens"] != vl["tokens"]:
            raise RuntimeError(f"different work at concurrency {c}: {gw} vs {vl}")
        row: dict[str, Any] = {
            "concurrency": c,
            "vllm_tok_s": round(vl["tok_s"], 1),
            "gateway_tok_s": round(gw["tok_s"], 1),
            "tok_s_ratio": round(gw["tok_s"] / vl["tok_s"], 3),
            "vllm_ttft_p50_ms": round(vl["ttft_p50_ms"], 1),
            "gateway_ttft_p50_ms": round(gw["ttft_p50_ms"], 1),
            "ttft_diff_ms": round(gw["ttft_p50_ms"] - vl["ttft_p50_ms"], 1),
            "ttft_p99_diff_ms": round(gw["ttft_p99_ms"] - vl["ttft_p99_ms"], 1),
            "vllm_gap_p50_ms": round(vl["gap_p50_ms"], 2),
            "gateway_gap_p50_ms": round(gw["gap_p50_ms"], 2),
            "vllm_gap_p99_ms": round(vl["gap_p99_ms"], 2),
            "gateway_gap_p99_ms": round(gw["gap_p99_ms"], 2),
        }
        old = best.get("gateway" + OLD)
        if old is not None:  # the baseline tree's gateway, same rounds
            if old["tokens"] != vl["tokens"]:
                raise RuntimeError(f"different work at concurrency {c}: {old} vs {vl}")
            row |= {
                "old_tok_s": round(old["tok_s"], 1),
                "old_tok_s_ratio": round(old["tok_s"] / vl["tok_s"], 3),
                "old_ttft_p50_ms": round(old["ttft_p50_ms"], 1),
                "old_ttft_diff_ms": round(old["ttft_p50_ms"] - vl["ttft_p50_ms"], 1),
                "old_gap_p50_ms": round(old["gap_p50_ms"], 2),
            }
        rows.append(row)
    return rows


def sidebyside(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per concurrency: this tree's ratio to vLLM, TTFT added, gap p50 against the baseline's."""
    pairs = [
        ("tok_s_ratio", "tok_s_ratio", "old_tok_s_ratio"),
        ("tok_s", "gateway_tok_s", "old_tok_s"),
        ("ttft_diff_ms", "ttft_diff_ms", "old_ttft_diff_ms"),
        ("gap_p50_ms", "gateway_gap_p50_ms", "old_gap_p50_ms"),
    ]
    return [
        compare_row(f"{r['concurrency']} streams", fig, r[new], r[old])
        for r in rows
        if "old_tok_s" in r
        for fig, new, old in pairs
    ]


def run(opts: BenchOptions) -> BenchResult:
    """Build the demo model, start both servers, alternate the load, compare."""
    try:
        import vllm  # noqa: F401

        from app.demo_model import build_demo_model
    except ImportError as exc:
        raise Skip(f"vllm is not installed: {exc}") from exc
    result = BenchResult(NAME)
    rounds, per_worker = (1, 1) if opts.quick else (max(opts.rounds, 2), 4)
    with contextlib.ExitStack() as stack:
        model_dir = build_demo_model(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        # One at a time: two engines loading at once on 2 cores only slows both.
        vl = stack.enter_context(vllm_server(model_dir))
        gw = stack.enter_context(gateway(model_dir))
        targets = {"vllm": vl.base_url, "gateway": gw.base_url}
        started = [vl, gw]
        if opts.baseline is not None:
            started.append(stack.enter_context(gateway(model_dir, opts.baseline)))
            targets["gateway" + OLD] = started[-1].base_url
        for server in started:  # a server still settling after start would slow the first
            wait_idle(server)
        result.rows = measure(targets, rounds, per_worker)
    result.sidebyside = sidebyside(result.rows)
    result.goals = [
        goal
        for r in result.rows
        for goal in (
            Goal(
                f"gateway output tokens/s vs vLLM at concurrency {r['concurrency']}",
                f"≥ {GOAL_TOK_S_RATIO}x", f"{r['tok_s_ratio']}x",
                r["tok_s_ratio"] >= GOAL_TOK_S_RATIO,
            ),
            Goal(
                f"gateway TTFT p50 added at concurrency {r['concurrency']}",
                f"≤ {GOAL_TTFT_ADDED_MS} ms", f"{r['ttft_diff_ms']} ms",
                r["ttft_diff_ms"] <= GOAL_TTFT_ADDED_MS,
            ),
        )
    ]  # fmt: skip
    if not opts.quick and opts.baseline is None:  # a side-by-side run keeps the plain plots
        xs = [float(r["concurrency"]) for r in result.rows]
        series: dict[str, tuple[Sequence[float], Sequence[float]]] = {
            name: (xs, [r[f"{name}_tok_s"] for r in result.rows]) for name in ("vllm", "gateway")
        }
        result.plots.append(
            plots.lines("engine-tok-s", series, "Output tokens/s: gateway vs vLLM's own server",
                        "concurrent streams", "output tokens/s", logx=True)
        )  # fmt: skip
    result.notes.append(
        f"Greedy answers of at most {MAX_TOKENS} tokens, streamed; {per_worker} requests "
        f"per worker; best of {rounds} alternating rounds; TTFT = first content chunk."
    )
    return result


def main(argv: list[str] | None = None) -> int:
    """Run standalone and write bench/results/engine.json."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--baseline", type=Path, help="a checkout whose gateway runs alongside")
    args = parser.parse_args(argv)
    os.environ.update(ENGINE_ENV)
    base = None if args.baseline is None else baseline_tree(args.baseline)
    result = run(BenchOptions(quick=args.quick, rounds=args.rounds, baseline=base))
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    out = RESULTS_DIR / ("engine.json" if base is None else "engine-sidebyside.json")
    out.write_text(json.dumps(result.to_json(), indent=2) + "\n")
    for row in result.rows:
        print(row)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
