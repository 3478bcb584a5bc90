"""``previous_response_id`` chains on the real engine (the demo model), against the same turns
as raw chat completions on the same server, and (``--anchor``) against agentic-api.

Issue 25's chain goals. Every chain is a conversation of turns, each turn a streamed request
for at most 64 greedy tokens (temperature 0) to a distinct prompt:

- ``responses``: ``POST /v1/responses`` on the gateway, each turn naming the previous turn's
  response as ``previous_response_id`` (the server keeps the history, as a session);
- ``chat``: ``POST /v1/chat/completions`` on the same gateway and model, the client sending
  the whole history each turn (its own earlier answers): the same work, no state;
- ``anchor`` (``--anchor``): ``agentic-api`` 0.9.0 (the vLLM project's Rust gateway, from
  PyPI, ``bash bench/install-anchor.sh``) in front of vLLM's own OpenAI server with the same
  engine settings (bench/engine.py), the same ``previous_response_id`` chains;
- ``*-old`` (``--baseline DIR``): another checkout's gateway, same targets where it serves them.

Figures: ``history``: ``--history-chains`` chains of 20 sequential turns per target, TTFT of
turn 20 over turn 1 (medians over chains; the prefix cache should carry the history).
Concurrency 1, 8, 32: that many chains at once, ``--turns`` turns each; output tokens/s over
the round's wall time and TTFT p50 (request sent → first text delta), best of ``--rounds``
alternating rounds (odd rounds run the targets in the reverse order). Goals: turn 20 ≤ 1.5×
turn 1; responses ≥ 0.95× chat's tokens/s at 8 and 32 chains; against the anchor, tokens/s
≥ 1.0× and TTFT ≤ 1.0× at 1, 8 and 32 chains.

``python -m bench.responses_chains [--anchor] [--db sqlite] [--rounds 2] [--turns 4]
[--history-chains 7] [--baseline DIR] [--quick]``: prints JSON rows, writes
bench/results/responses_chains.json (``-sidebyside`` with a baseline; nothing with --quick).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import tempfile
import time
from collections.abc import Coroutine
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    BENCH_DIR,
    ServerProcess,
    baseline_tree,
    compare_row,
    free_port,
    stream_figures,
    ttft_growth,
)
from bench.engine import ENGINE_ENV, MAX_TOKENS, START_TIMEOUT_S, vllm_server
from bench.engine_sessions import MAX_MODEL_LEN, session_gateway
from bench.load import wait_idle
from bench.report import finish_standalone

CONCURRENCY = (1, 8, 32)
HISTORY_TURNS = 20
ANCHOR_BIN = BENCH_DIR / ".venv-anchor" / "bin" / "agentic-server"
GOAL_HISTORY_RATIO = 1.5
GOAL_VS_CHAT = 0.95
GOAL_VS_ANCHOR = 1.0
Turn = tuple[float, int]  # (TTFT s, output tokens)


def prompt(chain: str, k: int) -> str:
    """Distinct per chain and turn: no chain's first turn hits another's prefix cache."""
    return f"Chain {chain}, turn {k + 1}: tell me a story."


async def _sse(resp: aiohttp.ClientResponse) -> Any:
    """(event, data) of each SSE frame (``event:`` may be absent: then data's ``type``)."""
    event = ""
    async for raw in resp.content:
        line = raw.strip()
        if line.startswith(b"event: "):
            event = line[7:].decode()
        elif line.startswith(b"data: "):
            if line == b"data: [DONE]":
                return
            data = json.loads(line[6:])
            yield event or str(data.get("type", "")), data
            event = ""


async def responses_turn(
    http: aiohttp.ClientSession, url: str, text: str, previous: str | None
) -> tuple[float, int, str]:
    """(TTFT s, output tokens, response id) of one streamed ``/v1/responses`` turn."""
    body: dict[str, Any] = {
        "model": "demo", "input": text, "stream": True,
        "max_output_tokens": MAX_TOKENS, "temperature": 0,
    }  # fmt: skip
    if previous:
        body["previous_response_id"] = previous
    start = time.perf_counter()
    ttft, tokens, rid = 0.0, 0, ""
    async with http.post(url + "/v1/responses", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url} /v1/responses -> {resp.status}: {await resp.text()}")
        async for event, data in _sse(resp):
            if event == "response.output_text.delta" and data.get("delta") and not ttft:
                ttft = time.perf_counter() - start
            elif event == "response.created":
                rid = str(data["response"]["id"])
            elif event in ("response.completed", "response.incomplete"):
                tokens = int(data["response"]["usage"]["output_tokens"])
            elif event in ("response.failed", "error"):
                raise RuntimeError(f"{url}: {event}: {data}")
    return ttft, tokens, rid


async def chat_turn(
    http: aiohttp.ClientSession, url: str, messages: list[dict[str, str]]
) -> tuple[float, int, str]:
    """(TTFT s, completion tokens, answer) of one streamed chat completion."""
    body = {
        "model": "demo", "messages": messages, "max_tokens": MAX_TOKENS, "temperature": 0,
        "stream": True, "stream_options": {"include_usage": True},
    }  # fmt: skip
    start = time.perf_counter()
    ttft, tokens, text = 0.0, 0, ""
    async with http.post(url + "/v1/chat/completions", json=body) as resp:
        if resp.status != 200:
            raise RuntimeError(f"{url} /v1/chat/completions -> {resp.status}: {await resp.text()}")
        async for _, data in _sse(resp):
            for choice in data.get("choices") or []:
                piece = choice["delta"].get("content") or ""
                if piece and not ttft:
                    ttft = time.perf_counter() - start
                text += piece
            if data.get("usage"):
                tokens = int(data["usage"]["completion_tokens"])
    return ttft, tokens, text


async def chain(
    http: aiohttp.ClientSession, kind: str, url: str, name: str, turns: int
) -> list[Turn]:
    """One conversation of ``turns`` turns: chained responses, or chat with the history."""
    out: list[Turn] = []
    previous: str | None = None
    messages: list[dict[str, str]] = []
    for k in range(turns):
        text = prompt(name, k)
        if kind == "responses":
            ttft, tokens, previous = await responses_turn(http, url, text, previous)
        else:
            messages.append({"role": "user", "content": text})
            ttft, tokens, answer = await chat_turn(http, url, messages)
            messages.append({"role": "assistant", "content": answer})
        out.append((ttft, tokens))
    return out


def _session() -> aiohttp.ClientSession:
    connector = aiohttp.TCPConnector(limit=0)
    return aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=900))


async def concurrent_round(
    kind: str, url: str, chains: int, turns: int, tag: str
) -> dict[str, Any]:
    """``chains`` chains at once (after as many untimed one-turn chains, to warm up)."""
    async with _session() as http:
        await asyncio.gather(*(chain(http, kind, url, f"warm-{tag}-{i}", 1) for i in range(chains)))
        start = time.perf_counter()
        runs = await asyncio.gather(
            *(chain(http, kind, url, f"{tag}-{i}", turns) for i in range(chains))
        )
        wall = time.perf_counter() - start
    return stream_figures([t for run in runs for t in run], wall)


async def history_chain(kind: str, url: str, tag: str, turns: int) -> list[float]:
    async with _session() as http:
        return [t for t, _ in await chain(http, kind, url, tag, turns)]


Target = tuple[str, str, ServerProcess]  # (kind, base URL, the process to wait idle)


def measure(
    targets: dict[str, Target], rounds: int, turns: int, history_chains: int, history_turns: int
) -> list[dict[str, Any]]:
    """Concurrency rows (best of ``rounds`` alternating rounds) and the history rows."""
    rows: list[dict[str, Any]] = []

    def run(coro: Coroutine[Any, Any, Any], server: ServerProcess) -> Any:
        got = asyncio.run(coro)
        wait_idle(server)
        return got

    for c in CONCURRENCY:
        best: dict[str, dict[str, Any]] = {}
        for r in range(rounds):
            # Odd rounds in the reverse order: a target's place in the round moved its figure
            # by ~10 % at 32 chains (bench/README.md, the fourth quiet sitting).
            order = list(targets.items())
            for name, (kind, url, server) in order if r % 2 == 0 else reversed(order):
                tag = f"{name}-c{c}-r{r}"
                got = run(concurrent_round(kind, url, c, turns, tag), server)
                if name not in best or got["tok_s"] > best[name]["tok_s"]:
                    best[name] = got
        row: dict[str, Any] = {"chains": c, "turns": turns}
        for name, got in best.items():
            row[f"{name}_tok_s"] = round(got["tok_s"], 1)
            row[f"{name}_ttft_p50_ms"] = round(got["ttft_p50_ms"], 1)
            row[f"{name}_tokens"] = got["tokens"]
        print(json.dumps(row), flush=True)  # as measured: a long run shows its progress
        rows.append(row)
    ttfts: dict[str, list[list[float]]] = {name: [] for name in targets}
    for k in range(history_chains):  # target by target, chain by chain: noise hits all
        for name, (kind, url, server) in targets.items():
            tag = f"history-{name}-{k}"
            ttfts[name].append(run(history_chain(kind, url, tag, history_turns), server))
    for name, runs in ttfts.items():
        row = {"server": name, "history_turns": history_turns, "chains": len(runs)}
        # ratio_3: steadier, not the goal's definition: the last 3 turns over the first 3
        ratio_3 = round(statistics.median(sum(r[-3:]) / sum(r[:3]) for r in runs), 2)
        rows.append({**row, **ttft_growth(runs), "ratio_3": ratio_3})
    return rows


def goals(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The issue's goals, from the rows that were measured."""
    out: list[dict[str, Any]] = []

    def goal(what: str, target: str, measured: float, met: bool) -> None:
        out.append({"goal": what, "target": target, "measured": measured, "met": met})

    for r in rows:
        if "server" in r:
            if r["server"] == "responses":
                goal(
                    f"TTFT turn {r['history_turns']} / turn 1 (responses chain)",
                    f"<= {GOAL_HISTORY_RATIO}x",
                    r["ratio"],
                    r["ratio"] <= GOAL_HISTORY_RATIO,
                )
            continue  # fmt: skip
        c = r["chains"]
        if c in (8, 32) and "chat_tok_s" in r:
            ratio = round(r["responses_tok_s"] / r["chat_tok_s"], 3)
            goal(f"tokens/s responses / chat ({c} chains)", f">= {GOAL_VS_CHAT}x", ratio,
                 ratio >= GOAL_VS_CHAT)  # fmt: skip
        if "anchor_tok_s" in r:
            ratio = round(r["responses_tok_s"] / r["anchor_tok_s"], 3)
            goal(f"tokens/s vs agentic-api ({c} chains)", f">= {GOAL_VS_ANCHOR}x", ratio,
                 ratio >= GOAL_VS_ANCHOR)  # fmt: skip
            ttft = round(r["responses_ttft_p50_ms"] / r["anchor_ttft_p50_ms"], 3)
            goal(f"TTFT p50 vs agentic-api ({c} chains)", f"<= {GOAL_VS_ANCHOR}x", ttft,
                 ttft <= GOAL_VS_ANCHOR)  # fmt: skip
    return out


def sidebyside(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each target against its ``-old`` twin (a ``--baseline`` run)."""
    out = []
    for r in rows:
        if "server" in r:
            continue
        for kind in ("responses", "chat"):
            for fig in ("tok_s", "ttft_p50_ms"):
                new, old = r.get(f"{kind}_{fig}"), r.get(f"{kind}-old_{fig}")
                if new is not None and old is not None:
                    out.append(compare_row(f"{kind}, {r['chains']} chains", fig, new, old))
    return out


def anchor_server(vllm_url: str) -> ServerProcess:
    """agentic-server (bench/.venv-anchor) in front of ``vllm_url``, its store in SQLite."""
    if not ANCHOR_BIN.exists():
        raise SystemExit(f"{ANCHOR_BIN} is missing: run `bash bench/install-anchor.sh`")
    port = free_port()
    db = Path(tempfile.mkdtemp(prefix="bench-anchor-")) / "anchor.db"
    cmd = [str(ANCHOR_BIN), "--llm-api-base", vllm_url, "--gateway-host", "127.0.0.1"]
    cmd += ["--gateway-port", str(port), "--db-url", f"sqlite://{db}?mode=rwc"]
    env = {"OPENAI_API_KEY": "unused", "RUST_LOG": "warn"}
    server = ServerProcess("agentic-api", cmd, port, env=env, ready_path="/health")
    server.ready_timeout_s = START_TIMEOUT_S
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", default="sqlite", choices=["sqlite", "postgres"])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--turns", type=int, default=4, help="turns per chain at 1/8/32 chains")
    # 7: one turn's TTFT is ~12 ms and moves by a few ms between turns; the median of 3
    # chains' ratios moved by +-0.4 between sittings (bench/README.md).
    parser.add_argument("--history-chains", type=int, default=7)
    parser.add_argument("--anchor", action="store_true", help="agentic-api in front of vLLM too")
    parser.add_argument("--baseline", type=Path, help="another checkout, side by side")
    parser.add_argument("--quick", action="store_true", help="smoke run; writes nothing")
    args = parser.parse_args(argv)
    history_turns = HISTORY_TURNS
    if args.quick:
        args.rounds, args.turns, args.history_chains, history_turns = 1, 2, 1, 3
    if args.baseline is not None:
        try:
            args.baseline = baseline_tree(args.baseline)
        except ValueError as exc:
            parser.error(str(exc))
    os.environ.update(ENGINE_ENV)
    from app.demo_model import build_demo_model

    with contextlib.ExitStack() as stack:
        model_dir = build_demo_model(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        gw = stack.enter_context(session_gateway(model_dir, args.db))
        targets: dict[str, Target] = {
            "responses": ("responses", gw.base_url, gw),
            "chat": ("chat", gw.base_url, gw),
        }
        if args.baseline is not None:
            old = stack.enter_context(session_gateway(model_dir, args.db, args.baseline))
            targets["chat-old"] = ("chat", old.base_url, old)
            if asyncio.run(_serves_responses(old.base_url)):
                targets["responses-old"] = ("responses", old.base_url, old)
        if args.anchor:
            vl = stack.enter_context(vllm_server(model_dir, MAX_MODEL_LEN))
            anchor = stack.enter_context(anchor_server(vl.base_url))
            targets["anchor"] = ("responses", anchor.base_url, vl)
        for _, _, server in targets.values():
            wait_idle(server)
        rows = measure(targets, args.rounds, args.turns, args.history_chains, history_turns)
    for row in rows[len(CONCURRENCY) :]:  # the history rows (the others were printed)
        print(json.dumps(row), flush=True)
    finish_standalone(
        "responses_chains", argv, rows, goals(rows), sidebyside(rows),
        baseline=args.baseline is not None, write=not args.quick,
    )  # fmt: skip
    return 0


async def _serves_responses(url: str) -> bool:
    async with _session() as http:
        try:
            await responses_turn(http, url, "hello", None)
        except (RuntimeError, aiohttp.ClientError):
            return False
    return True


if __name__ == "__main__":
    raise SystemExit(main())
