"""Server CPU per persisted agent turn: JSON against SSE-streamed session messages.

``POST /v1/sessions/{id}/messages`` on one gateway worker (``agentstation serve``), an agent on
the scripted model (it echoes the message: a few events per turn, no model time), SQLite and/or
a fresh bench PostgreSQL database. ``--turns`` turns at ``--concurrency`` at once, each on its own
session (a session takes one turn at a time), over keep-alive aiohttp connections, in rounds
alternating the modes (and, with ``--baseline DIR``, another checkout's gateway, side by side).
Reported per database, gateway and mode: the server process's CPU (user + system, /proc) per
turn, median over the rounds. ``chat_json``/``chat_stream``: the same through
``/v1/chat/completions`` to the scripted model itself (stateless, no run: the OpenAI chunk
stream's cost).

Run: ``python -m bench.turn_cpu [--db sqlite postgres] [--turns 320] [--concurrency 32]
[--rounds 3] [--baseline DIR]`` (prints one JSON row per database, gateway and mode), or
``python -m bench turn_cpu [--baseline DIR]`` (a table with issue 29's goals: a streamed turn
≤ 1.5 ms of server CPU on PostgreSQL, ≤ 2 ms on SQLite).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
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
)
from bench.gateway import scripted_gateway

NAME = "turn_cpu"
AGENT_SPEC = {"kind": "agent", "model": "scripted"}
GOALS_MS = {"postgres": 1.5, "sqlite": 2.0}  # issue 29: server CPU per streamed turn
MODES = ("json", "stream", "chat_json", "chat_stream")
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}


async def turns(server: ServerProcess, sessions: list[str], n: int, mode: str) -> float:
    """``n`` turns, ``len(sessions)`` at once; the server's CPU ms per turn. ``chat_*``: the
    raw scripted model through ``/v1/chat/completions`` (stateless; an OpenAI chunk stream)."""
    stream = mode.endswith("stream")
    chat = mode.startswith("chat")
    body: dict[str, Any] = dict(CHAT) if chat else {"message": "hello world"}
    body["stream"] = stream
    end = b"[DONE]" if chat else b"run.completed"
    queue: asyncio.Queue[int] = asyncio.Queue()
    for i in range(n):
        queue.put_nowait(i)
    failures: list[str] = []

    async def worker(http: aiohttp.ClientSession, sid: str) -> None:
        path = "/v1/chat/completions" if chat else f"/v1/sessions/{sid}/messages"
        url = server.base_url + path
        while not queue.empty():
            queue.get_nowait()
            async with http.post(url, json=body) as resp:
                raw = await resp.read()
            if resp.status != 200 or (stream and end not in raw):
                failures.append(f"{resp.status}: {raw[-200:]!r}")

    connector = aiohttp.TCPConnector(limit=len(sessions))
    async with aiohttp.ClientSession(connector=connector) as http:
        cpu0 = server.cpu_seconds()
        await asyncio.gather(*(worker(http, sid) for sid in sessions))
        cpu = server.cpu_seconds() - cpu0
    if failures:
        raise RuntimeError(f"{len(failures)} turns failed, e.g. {failures[0]}")
    return cpu / n * 1e3


def collect(
    dbs: list[str], n: int, concurrency: int, rounds: int, baseline: Path | None
) -> list[dict[str, Any]]:
    """One row per database, gateway (``new``, ``old``) and mode: server CPU ms per turn,
    the median over ``rounds`` alternating rounds."""
    trees: dict[str, Path | None] = {"new": None}
    if baseline is not None:
        trees["old"] = baseline.resolve()
    rows = []
    for db in dbs:
        with contextlib.ExitStack() as stack:
            gateways = {
                name: stack.enter_context(scripted_gateway("turn_cpu", db, t))
                for name, t in trees.items()
            }
            sessions: dict[str, list[str]] = {}
            for name, gw in gateways.items():
                http_json("POST", f"{gw.base_url}/v1/agents", {"name": "a", "spec": AGENT_SPEC})
                sessions[name] = [
                    str(http_json("POST", f"{gw.base_url}/v1/sessions", {"agent": "a"})["id"])
                    for _ in range(concurrency)
                ]
                for mode in MODES:  # warm-up: imports, caches, connection pools
                    asyncio.run(turns(gw, sessions[name], concurrency, mode))
            figures: dict[tuple[str, str], list[float]] = {}
            for _ in range(rounds):
                for name, gw in gateways.items():
                    for mode in MODES:
                        ms = asyncio.run(turns(gw, sessions[name], n, mode))
                        figures.setdefault((name, mode), []).append(ms)
            for (name, mode), values in figures.items():
                rows.append(
                    {
                        "db": db,
                        "gateway": name,
                        "mode": mode,
                        "server_cpu_ms_per_turn": round(statistics.median(values), 3),
                        "rounds": [round(v, 3) for v in values],
                    }
                )
    return rows


def goals(rows: list[dict[str, Any]]) -> list[Goal]:
    """Issue 29: server CPU per streamed persisted turn."""
    out = []
    for db, target in GOALS_MS.items():
        ms = next(
            (
                r["server_cpu_ms_per_turn"]
                for r in rows
                if r["db"] == db and r["gateway"] == "new" and r["mode"] == "stream"
            ),
            None,
        )
        out.append(
            Goal(f"server CPU per streamed persisted turn ({db})", f"≤ {target} ms",
                 "-" if ms is None else f"{ms:.2f} ms", None if ms is None else ms <= target,
                 "" if ms is None else f"{ms - target:+.2f} ms")
        )  # fmt: skip
    return out


def run(opts: BenchOptions) -> BenchResult:
    """``python -m bench turn_cpu``: both databases, 32 concurrent, ``opts.rounds`` rounds."""
    result = BenchResult(NAME)
    n = 64 if opts.quick else 320
    rows: list[dict[str, Any]] = []
    for db in ("sqlite", "postgres"):
        try:
            rows += collect([db], n, 32, max(opts.rounds, 1), opts.baseline)
        except Skip as exc:
            result.notes.append(f"{db} skipped: {exc}")
    by = {(r["db"], r["gateway"], r["mode"]): r for r in rows}
    for (db, gw, mode), row in by.items():
        result.rows.append(
            {
                "target": f"{db}-{mode}" + (OLD if gw == "old" else ""),
                "server_cpu_ms_per_turn": row["server_cpu_ms_per_turn"],
                "rounds": row["rounds"],
            }
        )
        twin = by.get((db, "old", mode))
        if gw == "new" and twin is not None:
            result.sidebyside.append(
                compare_row(f"{db}-{mode}", "server_cpu_ms_per_turn",
                            row["server_cpu_ms_per_turn"], twin["server_cpu_ms_per_turn"])
            )  # fmt: skip
    result.goals = goals(rows)
    result.notes.append(
        f"{n} turns at 32 concurrent per round (one session per client), modes and trees "
        "alternating; the server process's CPU from /proc (10 ms ticks), median of the rounds."
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--turns", type=int, default=320)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, run side by side")
    args = parser.parse_args(argv)
    rows = collect(args.db, args.turns, args.concurrency, args.rounds, args.baseline)
    for row in rows:
        print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
