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
[--rounds 3] [--baseline DIR]`` (prints one JSON row per database, gateway and mode).
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

from bench.common import ServerProcess, gateway_server, http_json, reset_postgres_db
from bench.gateway import GATEWAY_ENV, SCRIPTED

AGENT_SPEC = {"kind": "agent", "model": "scripted"}
MODES = ("json", "stream", "chat_json", "chat_stream")
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}


def turn_gateway(db: str, tree: Path | None) -> ServerProcess:
    """A gateway on SQLite or its own fresh PostgreSQL database; ``tree``: another checkout."""
    suffix = "_base" if tree is not None else ""
    url = (
        reset_postgres_db("agentstation_bench_turn_cpu" + suffix, tree)
        if db == "postgres"
        else None
    )
    return gateway_server(f"turn-cpu-{db}{suffix}", SCRIPTED, url, tree=tree, **GATEWAY_ENV)


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", default=["sqlite", "postgres"])
    parser.add_argument("--turns", type=int, default=320)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, run side by side")
    args = parser.parse_args(argv)
    trees: dict[str, Path | None] = {"new": None}
    if args.baseline is not None:
        trees["old"] = args.baseline.resolve()
    for db in args.db:
        with contextlib.ExitStack() as stack:
            gateways = {name: stack.enter_context(turn_gateway(db, t)) for name, t in trees.items()}
            sessions: dict[str, list[str]] = {}
            for name, gw in gateways.items():
                http_json("POST", f"{gw.base_url}/v1/agents", {"name": "a", "spec": AGENT_SPEC})
                sessions[name] = [
                    str(http_json("POST", f"{gw.base_url}/v1/sessions", {"agent": "a"})["id"])
                    for _ in range(args.concurrency)
                ]
                for mode in MODES:  # warm-up: imports, caches, connection pools
                    asyncio.run(turns(gw, sessions[name], args.concurrency, mode))
            figures: dict[tuple[str, str], list[float]] = {}
            for _ in range(args.rounds):
                for name, gw in gateways.items():
                    for mode in MODES:
                        ms = asyncio.run(turns(gw, sessions[name], args.turns, mode))
                        figures.setdefault((name, mode), []).append(ms)
            for (name, mode), values in figures.items():
                row: dict[str, Any] = {
                    "db": db,
                    "gateway": name,
                    "mode": mode,
                    "server_cpu_ms_per_turn": round(statistics.median(values), 3),
                    "rounds": [round(v, 3) for v in values],
                }
                print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
