"""Instructions per persisted turn and per ``POST /v1/sessions`` (callgrind): load-proof.

The gateway (``agentstation serve``, the scripted model, SQLite or a fresh PostgreSQL
database) runs under valgrind's callgrind, instrumented only while a target runs: one keep-alive
connection sends ``--requests`` requests of a target (``stream``: a streamed turn to its
``run.completed``, round robin over 32 sessions; ``json``: the same turn answered as JSON;
``create``: ``POST /v1/sessions``), ``--rounds`` times. After each round the gateway idles 3 s,
counted too: its timers' rate (instructions per second) times the round's wall time is
subtracted. Under valgrind a request takes ~50x longer, so caches and timers that would not
expire within a few requests at full speed are set long for every tree alike (``QUIET``), or
the count would include lookups a served gateway does not do. Separate runs still differ by a
few per cent (the gateway's background work is bursty): compare trees within one run
(``--baseline DIR``: that checkout's gateway, measured at the same time).

Run: ``python -m bench.turn_instructions [--db postgres sqlite] [--targets stream create]
[--requests 40] [--rounds 3] [--baseline DIR]`` (one JSON row per database, tree and target).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import http.client
import json
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.callgrind import control, dumped
from bench.common import gateway_server, reset_postgres_db
from bench.gateway import GATEWAY_ENV, SCRIPTED

QUIET = {
    "AGENTSTATION_" + k: v
    for k, v in {
        "SESSION_CACHE_TTL_S": "3600",
        "TENANT_BUDGET_TTL_S": "3600",
        "AGENT_CACHE_TTL_S": "3600",
        "AUTH_CACHE_TTL_S": "3600",
        "USAGE_FLUSH_S": "60",
        "HEARTBEAT_S": "30",
        "REPLICA_TTL_S": "600",
        "APPROVAL_CHECK_S": "600",
        "DB_PING_IDLE_S": "3600",
    }.items()
}


def count(
    db: str, tree: Path | None, targets: list[str], n: int, rounds: int
) -> list[dict[str, Any]]:
    """Instructions per request of each target on one gateway (``tree``: another checkout)."""
    tag = "base" if tree is not None else "new"
    url = reset_postgres_db(f"agentstation_bench_instr_{tag}", tree) if db == "postgres" else None
    out = Path(tempfile.mkdtemp(prefix="bench-instr-"))
    server = gateway_server(f"instr-{db}-{tag}", SCRIPTED, url, tree=tree, **GATEWAY_ENV, **QUIET)
    server.cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                  f"--callgrind-out-file={out}/cg.%p", *server.cmd]  # fmt: skip
    server.ready_timeout_s = 900.0
    rows = []
    with server:
        assert server.proc is not None
        pid = server.proc.pid
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=600)

        def post(path: str, body: dict[str, Any]) -> bytes:
            conn.request(
                "POST", path, json.dumps(body).encode(), {"Content-Type": "application/json"}
            )
            answer = conn.getresponse()
            raw = answer.read()
            assert answer.status in (200, 201), (path, answer.status, raw[-300:])
            return raw

        post("/v1/agents", {"name": "a", "spec": {"kind": "agent", "model": "scripted"}})
        sessions = [json.loads(post("/v1/sessions", {"agent": "a"}))["id"] for _ in range(32)]
        turns = [0]

        def send(target: str, k: int) -> None:
            for _ in range(k):
                if target == "create":
                    post("/v1/sessions", {"agent": "a"})
                    continue
                sid = sessions[turns[0] % len(sessions)]
                turns[0] += 1
                raw = post(f"/v1/sessions/{sid}/messages",
                           {"message": "hello world", "stream": target == "stream"})  # fmt: skip
                assert target != "stream" or b"run.completed" in raw, raw[-300:]

        for target in targets:
            send(target, 32)  # warm-up, uninstrumented
        control(pid, "-i", "on")
        for target in targets:
            send(target, 10)
        counts: dict[str, list[tuple[int, float]]] = {t: [] for t in targets}
        idle_n, idle_s = 0, 0.0
        for _ in range(rounds):
            for target in targets:
                control(pid, "-z")
                start = time.monotonic()
                send(target, n)
                wall = time.monotonic() - start
                control(pid, "-d")
                counts[target].append((dumped(out, pid), wall))
                control(pid, "-z")
                start = time.monotonic()
                time.sleep(3.0)
                control(pid, "-d")
                idle_s += time.monotonic() - start
                idle_n += dumped(out, pid)
        rate = idle_n / idle_s
        for target in targets:
            per = [(c - rate * w) / n for c, w in counts[target]]
            rows.append({"db": db, "gateway": "old" if tree else "new", "target": target,
                         "instructions": round(statistics.median(per)),
                         "rounds": [round(p) for p in per], "idle_per_s": round(rate)})  # fmt: skip
    shutil.rmtree(out, ignore_errors=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", nargs="+", default=["postgres", "sqlite"])
    parser.add_argument("--targets", nargs="+", default=["stream", "create"])
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--baseline", type=Path, help="another checkout, counted at the same time")
    args = parser.parse_args(argv)
    if shutil.which("valgrind") is None:
        raise SystemExit("needs valgrind (apt-get install valgrind)")
    trees: list[Path | None] = [None]
    if args.baseline is not None:
        trees.append(args.baseline.resolve())
    for db in args.db:
        with concurrent.futures.ThreadPoolExecutor(len(trees)) as pool:
            jobs = [
                pool.submit(count, db, t, args.targets, args.requests, args.rounds) for t in trees
            ]
            for job in jobs:
                for row in job.result():
                    print(json.dumps(row), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
