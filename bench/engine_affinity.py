"""Engine fleet: session affinity (``routing: session``) against round robin, side by side.

A fleet of two vLLM CPU servers per policy (``python -m vllm.entrypoints.openai.api_server``,
prefix caching on, stats on so ``/metrics`` counts prefix-cache queries and hits; each policy
its own pair, so neither policy's requests fill or evict the other's cache) behind the
gateway's ``openai`` backend with ``upstreams``
(``app.models.openai_backend.create_openai_handle``: the fleet code itself,
``FleetRawBackend`` over ``UpstreamPool``), one handle per policy.
``--sessions`` conversations (16) of ``--turns`` turns (20) each: a turn streams the whole
history plus a new user message (greedy, at most ``--max-tokens`` tokens) and appends the
answer. Turn by turn, all sessions of one policy send their turn at once (in a shuffled
order, as requests arrive), then all sessions of the other policy (which goes first
alternates per turn), so machine noise hits both. Each policy's sessions share one system
prompt (an agent's instructions, ~400 tokens). ``--kv-cache-mib`` sizes each server's KV
cache: how much of the sessions' histories a server can keep is what affinity saves (round
robin keeps every session on both servers). ``--model smollm2`` (the default model,
SmolLM2-135M in float32: 45 KiB of KV per token; prefill costs enough to show in TTFT) with
``--max-tokens 16 --kv-cache-mib 320 --block-size 32`` is sized so that affinity's sessions
fit each server's cache at turn 20 and round robin's do not (the arithmetic: bench/README.md,
"Engine fleet"); the demo model (1 KiB per token) has almost no prefill cost. Round robin's
arrival order sends exactly half of each server's sessions back to it each turn
(``round_robin_order``); each engine runs one unbound OpenMP thread (``--engine-threads``).
Reported per policy: the prefix-cache hit rate (hits / queried tokens, the
servers' ``vllm:prefix_cache_*`` counters over that policy's requests) overall and on the last
turn, the TTFT (request sent to the first content chunk) of the last turn, median and p90
over the sessions, the sessions the pool placed on each server, and per turn the hit rate,
TTFT p50 and wall time (also printed to stderr as the run goes). Goal (issue 27): affinity's
last-turn TTFT p50 ≤ 0.7× round robin's.

``python -m bench.engine_affinity [--model demo|smollm2] [--sessions 16] [--turns 20]
[--max-tokens 16] [--kv-cache-mib 64] [--block-size N] [--engine-threads 1]`` (prints JSON
rows and a table; writes bench/results/engine_affinity[-smollm2]-kv<MiB>[-b<block>]-t<max
tokens>[-<sessions>x<turns>].json). The issue's run: ``--model smollm2 --max-tokens 16
--kv-cache-mib 320 --block-size 32`` (about 6 minutes on 2 loaded cores).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import RESULTS_DIR, ServerProcess, free_port, machine_description
from bench.engine import ENGINE_ENV, START_TIMEOUT_S
from bench.report import markdown_table

POLICIES = ("session", "round_robin")
GOAL_TTFT_RATIO = 0.7
# An agent's instructions, the same for every session of a policy (about 300 tokens: vLLM on
# CPU caches whole blocks of 128 tokens, so shorter prefixes are never hits).
INSTRUCTIONS = " ".join(
    f"Rule {i}: answer as a storyteller, keep the story consistent with what was said before."
    for i in range(20)
)
QUESTIONS = (
    "Tell me more about the river.",
    "What did the traveller find there?",
    "Describe the town by the bridge.",
    "Who lived in the old mill?",
    "What happened at night?",
)


def vllm_server(
    model_dir: Path,
    kv_cache_bytes: int,
    dtype: str = "bfloat16",
    block_size: int | None = None,
    threads: int = 1,
) -> ServerProcess:
    """vLLM's OpenAI server with the bench engine settings, stats on (for ``/metrics``);
    ``block_size``: tokens per KV block, the unit of prefix-cache hits (None: vLLM's CPU
    default, 128); ``threads``: OpenMP threads of the engine, unbound (0: vLLM's default,
    threads bound to every core: two engines at once on 2 cores then wait on each other's
    threads, turns took twice as long in a probe of 8 × 1,000-token prompts)."""
    port = free_port()
    cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model_dir)]
    cmd += ["--served-model-name", "demo", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--dtype", dtype, "--enforce-eager", "--seed", "0", "--max-model-len", "4096"]
    cmd += ["--kv-cache-memory-bytes", str(kv_cache_bytes), "--enable-prefix-caching"]
    cmd += ["--disable-uvicorn-access-log"]
    if block_size is not None:
        cmd += ["--block-size", str(block_size)]
    env = dict(ENGINE_ENV)
    if threads:
        env.update(OMP_NUM_THREADS=str(threads), VLLM_CPU_OMP_THREADS_BIND="nobind")
    server = ServerProcess("vllm-affinity", cmd, port, env=env, ready_path="/health")
    server.ready_timeout_s = START_TIMEOUT_S
    return server


async def prefix_counters(http: aiohttp.ClientSession, urls: list[str]) -> tuple[float, float]:
    """(queried tokens, hit tokens) summed over the servers' ``/metrics``."""
    queries = hits = 0.0
    for url in urls:
        async with http.get(url + "/metrics") as resp:
            text = await resp.text()
        for line in text.splitlines():
            if line.startswith("vllm:prefix_cache_queries_total"):
                queries += float(line.rsplit(" ", 1)[1])
            elif line.startswith("vllm:prefix_cache_hits_total"):
                hits += float(line.rsplit(" ", 1)[1])
    return queries, hits


async def one_turn(raw: Any, sid: str, history: list[dict[str, str]], max_tokens: int) -> float:
    """Stream one turn through the fleet's raw API; append the answer; return the TTFT (s)."""
    request = {
        "model": "demo", "messages": history, "max_tokens": max_tokens, "temperature": 0,
        "user": sid, "stream": True,
    }  # fmt: skip
    start = time.perf_counter()
    ttft, text = 0.0, []
    async for chunk in raw.stream(request):
        for choice in chunk.get("choices") or []:
            piece = (choice.get("delta") or {}).get("content")
            if piece:
                ttft = ttft or time.perf_counter() - start
                text.append(piece)
    history.append({"role": "assistant", "content": "".join(text) or "..."})
    return ttft


def round_robin_order(
    rng: random.Random, sessions: int, last: dict[int, int], start: int
) -> list[int]:
    """The order round robin's sessions send one turn in (two servers; round robin gives the
    k-th request of the turn server ``(start + k) % 2``): random, except that exactly half of
    each server's sessions of the previous turn (``last``: session -> server, empty before the
    first turn; updated) come back to it and half go to the other server, the expectation of a
    random order. A plain shuffle leaves that to one draw: seed 0 sent 12 and 14 of 16 sessions
    back to their previous server on turns 19 and 20, so round robin's last turn looked like
    affinity's."""
    order = list(range(sessions))
    if last:
        to: dict[int, list[int]] = {0: [], 1: []}
        for server in (0, 1):
            mine = [s for s in order if last[s] == server]
            back = set(rng.sample(mine, len(mine) // 2))
            for s in mine:
                to[server if s in back else 1 - server].append(s)
        for group in to.values():
            rng.shuffle(group)
        order = [(to[(start + k) % 2] or to[(start + k + 1) % 2]).pop() for k in range(sessions)]
    else:
        rng.shuffle(order)
    for k, s in enumerate(order):
        last[s] = (start + k) % 2
    return order


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def measure(
    fleets: dict[str, list[str]], sessions: int, turns: int, max_tokens: int
) -> dict[str, Any]:
    """Run both policies turn by turn (``fleets``: each policy's server URLs); per policy: hit
    rates and last-turn TTFTs."""
    from app.models.openai_backend import OpenAIHandle, create_openai_handle

    handles = {
        p: create_openai_handle(
            {
                "name": f"demo-{p}",
                "model": "demo",
                "upstreams": [u + "/v1" for u in fleets[p]],
                "routing": p,
            }
        )
        for p in POLICIES
    }
    pools = {}
    for policy, handle in handles.items():
        assert isinstance(handle, OpenAIHandle) and handle.pool is not None
        pools[policy] = handle.pool
    histories = {
        p: [
            [
                {"role": "system", "content": f"[{p}] {INSTRUCTIONS}"},
                {"role": "user", "content": f"Session {s}: tell me a story about a river."},
            ]
            for s in range(sessions)
        ]
        for p in POLICIES
    }
    rng = random.Random(0)
    last_server: dict[int, int] = {}  # round robin: each session's server on its last turn
    counts = {p: [0.0, 0.0] for p in POLICIES}  # queried, hit
    last_counts = {p: [0.0, 0.0] for p in POLICIES}
    ttfts: dict[str, list[float]] = {p: [] for p in POLICIES}
    turn_s: dict[str, list[float]] = {p: [] for p in POLICIES}  # wall time of each turn
    loads: list[float] = []  # the machine's 1-minute load average after each turn
    per_turn: dict[str, list[dict[str, float]]] = {p: [] for p in POLICIES}
    async with aiohttp.ClientSession() as http:
        for turn in range(turns):
            order = POLICIES if turn % 2 == 0 else POLICIES[::-1]
            for policy in order:
                raw = handles[policy].raw
                before = await prefix_counters(http, fleets[policy])
                started = time.perf_counter()
                if policy == "round_robin":  # the next request's server: requests so far
                    sent = sum(u.requests for u in pools[policy].upstreams)
                    ids = round_robin_order(rng, sessions, last_server, sent)
                else:
                    ids = list(range(sessions))
                    rng.shuffle(ids)
                got = await asyncio.gather(
                    *(one_turn(raw, f"{policy}-{s}", histories[policy][s], max_tokens) for s in ids)
                )
                turn_s[policy].append(round(time.perf_counter() - started, 2))
                after = await prefix_counters(http, fleets[policy])
                queried, hit = after[0] - before[0], after[1] - before[1]
                counts[policy][0] += queried
                counts[policy][1] += hit
                per_turn[policy].append(
                    {
                        "hit_rate": round(hit / queried, 3) if queried else 0.0,
                        "ttft_p50_ms": round(statistics.median(got) * 1000, 1),
                        "wall_s": turn_s[policy][-1],
                    }
                )
                if turn == turns - 1:
                    last_counts[policy] = [queried, hit]
                    ttfts[policy] = list(got)
            loads.append(round(os.getloadavg()[0], 1))
            line = ", ".join(f"{p} {per_turn[p][-1]}" for p in POLICIES)
            print(f"turn {turn + 1}/{turns}: {line}, load {loads[-1]}", file=sys.stderr, flush=True)
            for policy in POLICIES:  # the next user message
                for history in histories[policy]:
                    history.append({"role": "user", "content": QUESTIONS[turn % len(QUESTIONS)]})
    spread = {p: [u.requests for u in pools[p].upstreams] for p in POLICIES}
    placed = {p: [u.sessions for u in pools[p].upstreams] for p in POLICIES}
    for handle in handles.values():
        await handle.close()
    rows: list[dict[str, Any]] = []
    for policy in POLICIES:
        q, h = counts[policy]
        lq, lh = last_counts[policy]
        rows.append(
            {
                "routing": policy,
                "prefix_hit_rate": round(h / q, 3) if q else None,
                "last_turn_prefix_hit_rate": round(lh / lq, 3) if lq else None,
                "last_turn_ttft_p50_ms": round(statistics.median(ttfts[policy]) * 1000, 1),
                "last_turn_ttft_p90_ms": round(_pct(ttfts[policy], 0.9) * 1000, 1),
                "queried_tokens": int(q),
                "requests_per_server": spread[policy],
                "sessions_per_server": placed[policy],  # placed by the pool (session only)
                "turn_wall_s_total": round(sum(turn_s[policy]), 1),
            }
        )
    p50 = {p: statistics.median(ttfts[p]) for p in POLICIES}
    p90 = {p: _pct(ttfts[p], 0.9) for p in POLICIES}
    ratio = p50["session"] / p50["round_robin"]
    return {
        "rows": rows,
        "ttft_ratio_session_over_round_robin": round(ratio, 3),
        "ttft_p90_ratio_session_over_round_robin": round(p90["session"] / p90["round_robin"], 3),
        "goal": f"<= {GOAL_TTFT_RATIO}",
        "goal_met": ratio <= GOAL_TTFT_RATIO,
        "sessions": sessions,
        "turns": turns,
        "max_tokens": max_tokens,
        "last_turn_ttfts_s": {p: [round(t, 3) for t in ttfts[p]] for p in POLICIES},
        "per_turn": per_turn,  # each turn: hit rate, TTFT p50, wall time
        "load_average_1m_per_turn": loads,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sessions", type=int, default=16)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--kv-cache-mib", type=int, default=64)
    parser.add_argument(
        "--engine-threads",
        type=int,
        default=1,
        help="OpenMP threads per engine, unbound (0: vLLM's default binding to every core)",
    )
    parser.add_argument(
        "--block-size",
        type=int,
        default=None,
        help="tokens per KV block, the unit of a prefix-cache hit (default: vLLM's CPU 128)",
    )
    parser.add_argument(
        "--model",
        choices=("demo", "smollm2"),
        default="demo",
        help="demo: the 2-layer test model; smollm2: the default model (SmolLM2-135M, float32, "
        "45 KiB of KV cache per token), whose prefill costs enough for the cache to show in TTFT",
    )
    args = parser.parse_args(argv)
    from app.default_model import default_model_dir, is_prepared
    from app.demo_model import build_demo_model

    with contextlib.ExitStack() as stack:
        if args.model == "smollm2":
            model_dir, dtype = default_model_dir(), "float32"  # bf16 on CPU: nonsense (NOTES)
            if not is_prepared(model_dir):
                raise SystemExit(f"{model_dir}: not prepared (agentstation default-model)")
        else:
            tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
            model_dir, dtype = build_demo_model(tmp), "bfloat16"
        # One at a time: two engines loading at once on 2 cores only slows both.
        kv = args.kv_cache_mib * 2**20
        started = time.perf_counter()
        load_at_start = os.getloadavg()[0]
        fleets = {
            p: [
                stack.enter_context(
                    vllm_server(model_dir, kv, dtype, args.block_size, args.engine_threads)
                ).base_url
                for _ in range(2)
            ]
            for p in POLICIES
        }
        servers_s = time.perf_counter() - started
        result = asyncio.run(measure(fleets, args.sessions, args.turns, args.max_tokens))
        result["kv_cache_mib"] = args.kv_cache_mib
        result["block_size"] = args.block_size or 128
        result["engine_threads"] = args.engine_threads
        result["servers_start_s"] = round(servers_s, 1)
        result["wall_s"] = round(time.perf_counter() - started, 1)
        result["load_average_1m_at_start"] = load_at_start
        result["model"] = args.model
        result["machine"] = machine_description()
        result["load_average_1m_at_end"] = os.getloadavg()[0]  # other work on the machine
    for row in result["rows"]:
        print(json.dumps(row))
    print(markdown_table(result["rows"]))
    ratio, met = result["ttft_ratio_session_over_round_robin"], result["goal_met"]
    verdict = "met" if met else "not met"
    print(f"last-turn TTFT p50, session / round robin: {ratio} (goal {result['goal']}: {verdict});"
          f" p90: {result['ttft_p90_ratio_session_over_round_robin']}; wall {result['wall_s']} s,"
          f" load average {result['load_average_1m_at_start']:.1f} at start,"
          f" {result['load_average_1m_at_end']:.1f} at the end")  # fmt: skip
    RESULTS_DIR.mkdir(parents=True, exist_ok=True)
    model = "" if args.model == "demo" else f"-{args.model}"
    size = "" if (args.sessions, args.turns) == (16, 20) else f"-{args.sessions}x{args.turns}"
    block = "" if args.block_size is None else f"-b{args.block_size}"
    name = f"engine_affinity{model}-kv{args.kv_cache_mib}{block}-t{args.max_tokens}{size}.json"
    out = RESULTS_DIR / name
    out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
