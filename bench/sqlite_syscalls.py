"""System calls per persisted turn of a served gateway on SQLite (load-proof).

``agentstation serve`` on the scripted model and a fresh SQLite database, ``bench.turn_cpu``'s
load (``--concurrency`` sessions, one client each, every mode warmed up first), then ``strace -c
-f`` attached to the server while ``--turns`` turns of ``--mode`` run: the counts per turn of
the calls that matter for SQLite (``pread64``: pages read again from the database or its WAL,
``pwrite64``: WAL frames and checkpoints, ``fdatasync``, ``fcntl``: file locks), and the rest.
The counts do not depend on the machine's load (strace's own times do: not shown). With
``--baseline DIR`` that checkout's gateway is measured the same way, after this one.

``python -m bench.sqlite_syscalls [--turns 640] [--mode stream] [--concurrency 32]
[--history N] [--baseline DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from bench.common import http_json
from bench.gateway import scripted_gateway
from bench.persistence import history as filled
from bench.turn_cpu import AGENT_SPEC, MODES, turns

SHOWN = ("pread64", "pwrite64", "fdatasync", "fcntl", "write", "read")


def measure(
    tree: Path | None, n: int, concurrency: int, mode: str, history: int = 0
) -> dict[str, Any]:
    """Syscalls per turn of one gateway (``tree``: another checkout); ``history``: each
    session's memory pre-filled with that many messages (``bench.persistence``'s)."""
    with scripted_gateway("sqlite_syscalls", "sqlite", tree) as gw:
        http_json("POST", f"{gw.base_url}/v1/agents", {"name": "a", "spec": AGENT_SPEC})
        sessions = [
            str(http_json("POST", f"{gw.base_url}/v1/sessions", {"agent": "a"})["id"])
            for _ in range(concurrency)
        ]
        if history:
            for sid in sessions:
                http_json("PUT", f"{gw.base_url}/v1/sessions/{sid}/memory", filled(history))
        for warm in MODES:
            asyncio.run(turns(gw, sessions, concurrency * 2, warm))
        assert gw.proc is not None
        out = Path(tempfile.mkdtemp(prefix="bench-strace-")) / "strace.txt"
        tracer = subprocess.Popen(
            ["strace", "-c", "-f", "-o", str(out), "-p", str(gw.proc.pid)],
            stderr=subprocess.DEVNULL,
        )
        try:
            import time

            time.sleep(1.0)  # attached to every thread
            cpu0 = gw.cpu_seconds()
            asyncio.run(turns(gw, sessions, n, mode))
            cpu = gw.cpu_seconds() - cpu0
        finally:
            tracer.terminate()
            tracer.wait(timeout=30)
        text = out.read_text()
        shutil.rmtree(out.parent, ignore_errors=True)
    calls: dict[str, int] = {}
    for line in text.splitlines():
        found = re.match(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if found and found[2] != "total":
            calls[found[2]] = int(found[1])
    row: dict[str, Any] = {f"{k}_per_turn": round(calls.get(k, 0) / n, 2) for k in SHOWN}
    row["all_per_turn"] = round(sum(calls.values()) / n, 2)
    row["server_cpu_ms_per_turn_under_strace"] = round(cpu / n * 1e3, 3)
    return row


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--turns", type=int, default=640)
    parser.add_argument("--concurrency", type=int, default=32)
    parser.add_argument("--mode", default="stream", choices=MODES)
    parser.add_argument("--history", type=int, default=0, help="messages per session first")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured after this one")
    args = parser.parse_args(argv)
    if shutil.which("strace") is None:
        raise SystemExit("needs strace")
    trees: list[tuple[str, Path | None]] = [("new", None)]
    if args.baseline is not None:
        trees.append(("old", args.baseline.resolve()))
    for name, tree in trees:
        row = measure(tree, args.turns, args.concurrency, args.mode, args.history)
        print(json.dumps({"gateway": name, "mode": args.mode, "history": args.history, **row}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
