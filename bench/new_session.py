"""New conversations: ``POST /v1/sessions`` alone, and a session's creation plus its first turn.

Issue 29: a Responses API request without ``previous_response_id`` starts a new conversation,
so a session's creation is on the path of every such request. One gateway worker per tree
(``agentstation serve``, the scripted model: an agent that echoes its message, no model time),
a fresh PostgreSQL database (and/or SQLite), closed loops of ``concurrency`` clients over
keep-alive aiohttp connections:

- ``create``: ``POST /v1/sessions`` and nothing else; latency p50/p99, requests/s, and the
  server process's CPU (user + system, /proc) per request;
- ``conversation``: ``POST /v1/sessions`` then the new session's first turn streamed
  (``POST /v1/sessions/{id}/messages``, ``stream: true``) to its ``run.completed``: time to the
  first ``message.delta`` from the start of the creation (TTFT), total time, CPU per
  conversation;
- ``chat``: the scripted model itself streamed through ``/v1/chat/completions`` (stateless,
  nothing stored): the raw call a conversation's TTFT is compared with.

Modes and trees alternate round by round (``--baseline DIR``: another checkout's gateway, side
by side). The goal ``POST /v1/sessions`` p50 ≤ 5 ms at 32 concurrent implies, closed-loop,
32 / 5 ms = 6,400 requests/s: ≤ 0.31 ms of CPU per request on a 2-core machine for the server
and the load generator together (see bench/README.md, "New conversations").

Run: ``python -m bench.new_session [--db postgres sqlite] [--requests 640] [--concurrency 8 32]
[--rounds 3] [--baseline DIR]``, or ``python -m bench new_session [--baseline DIR]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import statistics
import time
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import (
    OLD,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    Skip,
    compare_row,
    http_json,
    pct,
)
from bench.gateway import scripted_gateway

NAME = "new_session"
AGENT = "a"
AGENT_SPEC = {"kind": "agent", "model": "scripted"}
CHAT = {
    "model": "scripted",
    "messages": [{"role": "user", "content": "hello world"}],
    "stream": True,
}
MODES = ("create", "conversation", "chat")
CREATE_P50_MS = 5.0  # POST /v1/sessions p50 at 32 concurrent, PostgreSQL
TTFT_ADDED_MS = 20.0  # a new conversation's TTFT p50 over the raw call's, at 32 concurrent


def _proc_cpu(pid: int | str) -> float:
    """User + system CPU seconds of a process so far (0 when gone)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _postgres_cpu() -> float:
    """CPU seconds of this machine's PostgreSQL processes so far (every ``postgres`` process:
    the backends serving the gateway, the WAL writer, the checkpointer...)."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                if (entry / "comm").read_text().strip() == "postgres":
                    total += _proc_cpu(entry.name)
    return total


def _machine_busy() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far, every core (/proc/stat)."""
    ticks = [int(v) for v in Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]]
    idle = ticks[3] + ticks[4]  # idle, iowait
    hz = os.sysconf("SC_CLK_TCK")
    return (sum(ticks) - idle) / hz, sum(ticks) / hz


async def _load(server: ServerProcess, mode: str, n: int, concurrency: int) -> dict[str, Any]:
    """``n`` requests (or conversations) of ``mode``, ``concurrency`` at once, closed loop."""
    base = server.base_url
    create = json.dumps({"agent": AGENT}).encode()
    turn = json.dumps({"message": "hello world", "stream": True}).encode()
    chat = json.dumps(CHAT).encode()
    headers = {"Content-Type": "application/json"}
    left = [n]
    latencies: list[float] = []
    ttfts: list[float] = []
    failures: list[str] = []

    async def first_delta(resp: aiohttp.ClientResponse, mark: bytes, end: bytes) -> float | None:
        """Read the stream to ``end``; when ``mark`` first arrived (perf_counter)."""
        seen: float | None = None
        tail = b""
        async for chunk in resp.content.iter_any():
            if seen is None and mark in tail + chunk:
                seen = time.perf_counter()
            tail = (tail + chunk)[-64:]
            if end in tail:
                break
        return seen

    async def one(http: aiohttp.ClientSession) -> None:
        start = time.perf_counter()
        if mode == "chat":
            async with http.post(base + "/v1/chat/completions", data=chat, headers=headers) as r:
                seen = await first_delta(r, b'"content":"hello', b"[DONE]")
                ok = r.status == 200 and seen is not None
        else:
            async with http.post(base + "/v1/sessions", data=create, headers=headers) as r:
                raw = await r.read()
            ok, seen = r.status == 201, None
            if ok and mode == "conversation":
                sid = json.loads(raw)["id"]
                path = f"{base}/v1/sessions/{sid}/messages"
                async with http.post(path, data=turn, headers=headers) as r:
                    seen = await first_delta(r, b"event: message.delta", b"run.completed")
                    ok = r.status == 200 and seen is not None
            elif not ok:
                failures.append(f"{r.status}: {raw[-200:]!r}")
        done = time.perf_counter()
        if not ok:
            failures.append(f"{mode}: no answer or no first delta")
            return
        latencies.append((done - start) * 1e3)
        if seen is not None:
            ttfts.append((seen - start) * 1e3)

    async def worker(http: aiohttp.ClientSession) -> None:
        while left[0] > 0:
            left[0] -= 1
            await one(http)

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as http:
        me, pg0, (busy0, all0) = _proc_cpu(os.getpid()), _postgres_cpu(), _machine_busy()
        cpu0, wall0 = server.cpu_seconds(), time.perf_counter()
        await asyncio.gather(*(worker(http) for _ in range(concurrency)))
        cpu, wall = server.cpu_seconds() - cpu0, time.perf_counter() - wall0
        client, pg = _proc_cpu(os.getpid()) - me, _postgres_cpu() - pg0
        busy1, all1 = _machine_busy()
    if failures:
        raise RuntimeError(f"{len(failures)} of {n} {mode} requests failed, e.g. {failures[0]}")
    figures = {
        "p50_ms": pct(latencies, 50),
        "p99_ms": pct(latencies, 99),
        "rps": n / wall,
        "server_cpu_ms": cpu / n * 1e3,
        # Where the rest of the machine's CPU went (the bench's own client, PostgreSQL), and
        # how busy the whole machine was (1.0: every core, all the time): a closed loop at
        # ``concurrency`` whose machine is saturated queues on CPU (p50 ~ concurrency / rps).
        "client_cpu_ms": client / n * 1e3,
        "postgres_cpu_ms": pg / n * 1e3,
        "machine_busy": (busy1 - busy0) / max(all1 - all0, 1e-9),
    }
    if ttfts:
        figures["ttft_p50_ms"] = pct(ttfts, 50)
    return figures


def measure(
    db: str,
    gateways: dict[str, ServerProcess],
    requests: int,
    levels: list[int],
    rounds: int,
    modes: tuple[str, ...] = MODES,
) -> list[dict[str, Any]]:
    """Every mode at every concurrency on each gateway, alternating; one row per
    (db, gateway, mode, concurrency) with the medians over the rounds."""
    for gw in gateways.values():
        http_json("POST", f"{gw.base_url}/v1/agents", {"name": AGENT, "spec": AGENT_SPEC})
        for mode in modes:  # warm-up: imports, caches, connection pools
            asyncio.run(_load(gw, mode, max(levels), max(levels)))
    figures: dict[tuple[str, str, int], list[dict[str, Any]]] = {}
    for _ in range(rounds):
        for level in levels:
            for mode in modes:
                for key, gw in gateways.items():
                    n = requests if mode == "create" else max(requests // 2, level)
                    got = asyncio.run(_load(gw, mode, n, level))
                    figures.setdefault((key, mode, level), []).append(got)
    rows = []
    for (key, mode, level), runs in figures.items():
        row: dict[str, Any] = {"target": f"{db}-{mode}-c{level}{key}"}
        for fig in runs[0]:
            row[fig] = round(statistics.median(r[fig] for r in runs), 3)
        row["cpu_rounds"] = [round(r["server_cpu_ms"], 3) for r in runs]
        rows.append(row)
    return rows


def _find(rows: list[dict[str, Any]], target: str, fig: str) -> float | None:
    return next((r.get(fig) for r in rows if r["target"] == target), None)


def goals(rows: list[dict[str, Any]], top: int) -> list[Goal]:
    """Issue 29's goals for new conversations (PostgreSQL, at ``top`` concurrent)."""
    out = []
    p50 = _find(rows, f"postgres-create-c{top}", "p50_ms")
    out.append(
        Goal(f"POST /v1/sessions p50 at {top} concurrent (PostgreSQL)", f"≤ {CREATE_P50_MS} ms",
             "-" if p50 is None else f"{p50:.2f} ms",
             None if p50 is None else p50 <= CREATE_P50_MS,
             "" if p50 is None else f"{p50 - CREATE_P50_MS:+.2f} ms")
    )  # fmt: skip
    cpu = _find(rows, f"postgres-create-c{top}", "server_cpu_ms")
    budget = (os.cpu_count() or 1) * CREATE_P50_MS / top  # ms of CPU per request, all parties
    out.append(
        Goal(f"server CPU per POST /v1/sessions within what {CREATE_P50_MS} ms p50 at {top} "
             f"implies on {os.cpu_count()} cores (server and client together)",
             f"≤ {budget:.3f} ms", "-" if cpu is None else f"{cpu:.3f} ms",
             None if cpu is None else cpu <= budget,
             "" if cpu is None else f"{cpu - budget:+.3f} ms")
    )  # fmt: skip
    ttft = _find(rows, f"postgres-conversation-c{top}", "ttft_p50_ms")
    raw = _find(rows, f"postgres-chat-c{top}", "ttft_p50_ms")
    added = None if ttft is None or raw is None else ttft - raw
    out.append(
        Goal(f"new conversation TTFT p50 added vs the raw call at {top} concurrent "
             "(PostgreSQL, scripted model)", f"≤ {TTFT_ADDED_MS} ms",
             "-" if added is None else f"{added:+.2f} ms",
             None if added is None else added <= TTFT_ADDED_MS,
             "" if added is None else f"{added - TTFT_ADDED_MS:+.2f} ms")
    )  # fmt: skip
    return out


COMPARED = ["p50_ms", "p99_ms", "rps", "server_cpu_ms", "ttft_p50_ms"]


def sidebyside(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by = {r["target"]: r for r in rows}
    out = []
    for name, row in by.items():
        twin = by.get(name + OLD)
        if twin is None:
            continue
        out += [compare_row(name, f, row[f], twin[f]) for f in COMPARED if f in row and f in twin]
    return out


def collect(
    dbs: list[str],
    requests: int,
    levels: list[int],
    rounds: int,
    baseline: Path | None,
    modes: tuple[str, ...] = MODES,
) -> list[dict[str, Any]]:
    trees: dict[str, Path | None] = {"": None}
    if baseline is not None:
        trees[OLD] = baseline.resolve()
    rows: list[dict[str, Any]] = []
    for db in dbs:
        with contextlib.ExitStack() as stack:
            gws = {
                k: stack.enter_context(scripted_gateway("new_session", db, t))
                for k, t in trees.items()
            }
            rows += measure(db, gws, requests, levels, rounds, modes)
    return rows


def run(opts: BenchOptions) -> BenchResult:
    """``python -m bench new_session``: PostgreSQL (the goals' database), 8 and 32 concurrent."""
    result = BenchResult(NAME)
    levels = [32] if opts.quick else [8, 32]
    requests = 64 if opts.quick else 640
    try:
        result.rows = collect(["postgres"], requests, levels, opts.rounds, opts.baseline)
    except Skip as exc:
        result.skipped = str(exc)
        return result
    result.goals = goals(result.rows, max(levels))
    result.sidebyside = sidebyside(result.rows)
    result.notes.append(
        f"Closed loops over keep-alive connections, {requests} creations (half as many "
        "conversations) per round, modes and trees alternating, medians over "
        f"{opts.rounds} rounds; server CPU from /proc. TTFT: from the creation's start to the "
        "first message.delta (raw: to the chat stream's first content chunk)."
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", default=["postgres"])
    parser.add_argument("--requests", type=int, default=640)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--baseline", type=Path, help="another checkout, run side by side")
    args = parser.parse_args(argv)
    rows = collect(
        args.db, args.requests, args.concurrency, args.rounds, args.baseline, tuple(args.modes)
    )
    for row in rows:
        print(json.dumps(row), flush=True)
    for goal in goals(rows, max(args.concurrency)):
        print(json.dumps({"goal": goal.name, "target": goal.target, "measured": goal.measured,
                          "met": goal.met}), flush=True)  # fmt: skip
    for row in sidebyside(rows):
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
