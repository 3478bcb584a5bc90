"""Gateway overhead against the bare FastAPI echo: raw model, agent and session paths.

Targets, all driven by the same generator with the same connections, alternating:
``echo`` (bench/baselines/echo.py), ``chat`` (``/v1/chat/completions`` on the scripted model in
echo mode), ``agent`` (the same with ``model`` = an agent), ``session-sqlite`` and
``session-postgres`` (``POST /v1/sessions/{id}/messages``, non-streaming, over 128 sessions).
Throughput at ``opts.connections`` connections; added latency at one connection.
With ``--baseline DIR`` every gateway target also runs from that tree (``chat-old`` …), in
the same rounds right after its twin, and the side-by-side rows compare each figure.
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path
from typing import Any

from bench import plots
from bench.common import (
    OLD,
    PG_BENCH_DB,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    Skip,
    compare,
    gateway_server,
    http_json,
    pg_db_name,
    reset_postgres_db,
    uvicorn_server,
)
from bench.load import LoadResult, LoadSpec, alternate, stalled, summarize

NAME = "gateway"
SCRIPTED = [{"name": "scripted", "backend": "scripted"}]  # no replies: echoes the user
CHAT_PATH = "/v1/chat/completions"
CHAT_BODY = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}
AGENT = "bench-agent"
AGENT_SPEC = {"kind": "agent", "model": "scripted"}
SESSIONS = 128
# Sandbox off: no tool runs here, and its self-test would only slow the start.
GATEWAY_ENV = {"AGENTSTATION_SANDBOX_ENABLED": "false"}
# Issue 29: throughput at N connections vs the bare FastAPI echo (which validates the same
# request with the same model), per target; the session paths' goals are per-turn CPU and
# persistence (bench/turn_cpu.py, bench/persistence.py), so they get rows here, not goals.
MIN_RATIO = {"chat": 0.90, "agent": 0.85}
MAX_ADDED_P50_MS = 0.5
# The figures a side-by-side run compares, new against old.
COMPARED = ["vs_echo", "cpu_vs_echo", "added_p50_ms", "rps", "cpu_us_per_req", "p50_ms_c1"]


def scripted_gateway(bench: str, db: str, tree: Path | None) -> ServerProcess:
    """A gateway on the scripted model for the benchmark ``bench``, on SQLite or its own fresh
    PostgreSQL database (``agentstation_bench_<bench>``); ``tree``: another checkout (its
    database and server name end in ``_base``)."""
    suffix = "_base" if tree is not None else ""
    url = (
        reset_postgres_db(f"agentstation_bench_{bench}{suffix}", tree) if db == "postgres" else None
    )
    name = f"{bench.replace('_', '-')}-{db}{suffix}"
    return gateway_server(name, SCRIPTED, url, tree=tree, **GATEWAY_ENV)


def create_agent(base_url: str, name: str = AGENT, spec: dict[str, Any] | None = None) -> None:
    """Define the benchmark agent (scripted model, no tools)."""
    http_json("POST", f"{base_url}/v1/agents", {"name": name, "spec": spec or AGENT_SPEC})


def create_sessions(base_url: str, n: int, agent: str = AGENT) -> list[str]:
    """n sessions of the agent; their ids."""
    return [
        str(http_json("POST", f"{base_url}/v1/sessions", {"agent": agent})["id"]) for _ in range(n)
    ]


def session_spec(name: str, server: ServerProcess, n: int) -> LoadSpec:
    """Turns spread over n sessions; ``enqueue`` so a rare collision waits instead of 409."""
    ids = create_sessions(server.base_url, n)
    body = {"message": "hello world", "multitask_strategy": "enqueue"}
    paths = [f"/v1/sessions/{i}/messages" for i in ids]
    return LoadSpec(name, server.base_url, body, paths, server)


def num(value: float, digits: int) -> float | None:
    """Rounded, or None for NaN (a stalled run has no per-request figure)."""
    return None if math.isnan(value) else round(value, digits)


def _row(
    name: str, thr: LoadResult, lat: LoadResult, base_thr: LoadResult, base_lat: LoadResult
) -> dict[str, Any]:
    row: dict[str, Any] = {
        "target": name,
        "rps": round(thr.rps),
        "vs_echo": round(thr.rps / base_thr.rps, 3),
        "cpu_us_per_req": num(thr.server_us_per_req, 0),
        "cpu_vs_echo": num(thr.server_us_per_req / base_thr.server_us_per_req, 2),
    }
    if not stalled(lat):
        row |= {
            "p50_ms_c1": round(lat.p50_ms, 3),
            "added_p50_ms": round(lat.p50_ms - base_lat.p50_ms, 3),
            "p99_ms_c1": round(lat.p99_ms, 3),
            "added_p99_ms": round(lat.p99_ms - base_lat.p99_ms, 3),
        }
    if not stalled(thr):
        row |= {
            f"p50_ms_c{thr.connections}": round(thr.p50_ms, 2),
            f"p99_ms_c{thr.connections}": round(thr.p99_ms, 2),
        }
    row["errors"] = thr.errors + lat.errors
    row["stalled"] = ", ".join(f"c{r.connections}" for r in (lat, thr) if stalled(r))
    return row


def _goals(rows: list[dict[str, Any]]) -> list[Goal]:
    goals = []
    for row in rows[1:]:
        least = MIN_RATIO.get(row["target"])
        if least is None:  # a baseline tree's twin, or a session path
            continue
        ratio, added = row["vs_echo"], row.get("added_p50_ms", float("inf"))
        goals.append(
            Goal(
                f"{row['target']}: throughput vs bare FastAPI",
                f"≥ {least:.2f}×",
                f"{ratio:.3f}×",
                ratio >= least,
                f"{ratio - least:+.3f}×",
            )
        )
        goals.append(
            Goal(
                f"{row['target']}: added p50 latency",
                f"≤ {MAX_ADDED_P50_MS} ms",
                "stalled" if "added_p50_ms" not in row else f"{added:.3f} ms",
                added <= MAX_ADDED_P50_MS,
                "" if "added_p50_ms" not in row else f"{added - MAX_ADDED_P50_MS:+.3f} ms",
            )
        )
    return goals


def run(opts: BenchOptions) -> BenchResult:
    """Start echo and the gateways, alternate the load (1 connection first, then N), compare.

    The session paths get gateway processes of their own: their runs outlive the requests
    (a run abandoned when wrk stops still finishes), so they must not slow the other targets.
    """
    result = BenchResult(NAME)
    trees: list[tuple[str, Path | None]] = [("", None)]
    if opts.baseline is not None:
        trees.append((OLD, opts.baseline))
    with contextlib.ExitStack() as stack:
        echo = stack.enter_context(uvicorn_server("echo", "bench.baselines.echo:app"))
        groups: list[list[LoadSpec]] = [
            [LoadSpec("echo", echo.base_url, CHAT_BODY, [CHAT_PATH], echo)]
        ]
        for suffix, tree in trees:
            gw = stack.enter_context(
                gateway_server("gw-chat" + suffix, SCRIPTED, None, tree=tree, **GATEWAY_ENV)
            )
            sq = stack.enter_context(
                gateway_server("gw-sqlite" + suffix, SCRIPTED, None, tree=tree, **GATEWAY_ENV)
            )
            for server in (gw, sq):
                create_agent(server.base_url)
            specs = [
                LoadSpec("chat" + suffix, gw.base_url, CHAT_BODY, [CHAT_PATH], gw),
                LoadSpec(
                    "agent" + suffix, gw.base_url, {**CHAT_BODY, "model": AGENT}, [CHAT_PATH], gw
                ),
                session_spec("session-sqlite" + suffix, sq, SESSIONS),
            ]
            pg = _start_postgres_gateway(stack, result, tree)
            if pg is not None:
                create_agent(pg.base_url)
                specs.append(session_spec("session-postgres" + suffix, pg, SESSIONS))
            groups.append(specs)
        # Each target next to its twin from the baseline tree: echo, chat, chat-old, agent, …
        specs = [s for group in zip_longest_flat(groups) for s in group]
        lat = alternate(specs, opts.generator, 1, opts.dur(2.0), opts.rounds)
        thr = alternate(specs, opts.generator, opts.connections, opts.dur(), opts.rounds, 0)
    t = {k: summarize(v) for k, v in thr.items()}
    la = {k: summarize(v) for k, v in lat.items()}
    result.rows = [_row(s.name, t[s.name], la[s.name], t["echo"], la["echo"]) for s in specs]
    result.goals = _goals(result.rows)
    result.sidebyside = compare(result.rows, "target", COMPARED)
    if any(r.get("stalled") for r in result.rows):
        result.notes.append(
            "stalled cN: at N connections not one request completed within a run (the later "
            "rounds of that target are skipped); see the hot spots."
        )
    result.notes.append(
        "cpu_us_per_req: server CPU per completed request at N connections (from /proc); on a "
        "busy machine its ratio to the echo's is a steadier overhead figure than req/s."
    )
    if any(r["errors"] for r in result.rows):
        result.notes.append("Some targets answered non-2xx (errors column): figures are suspect.")
    result.notes.append(
        f"wrk/aiohttp generator: {opts.generator}; {opts.rounds} alternating rounds of "
        f"{opts.dur():.0f} s at {opts.connections} connections and {opts.dur(2.0):.0f} s at 1."
    )
    if not opts.quick and opts.baseline is None:  # a side-by-side run keeps the plain plots
        names = [r["target"] for r in result.rows]
        result.plots.append(
            plots.bars("gateway-rps", names, [r["rps"] for r in result.rows],
                       f"Throughput at {opts.connections} connections", "requests/s")
        )  # fmt: skip
        result.plots.append(
            plots.bars("gateway-p50", names, [r.get("p50_ms_c1", 0.0) for r in result.rows],
                       "Latency p50 at 1 connection", "ms")
        )  # fmt: skip
    return result


def zip_longest_flat(groups: list[list[LoadSpec]]) -> list[list[LoadSpec]]:
    """The first group, then the i-th spec of every other group side by side, for each i:
    [[echo], [chat, chat-old], [agent, agent-old], …] (a missing twin is left out)."""
    first, rest = groups[0], groups[1:]
    longest = max((len(g) for g in rest), default=0)
    return [first] + [[g[i] for g in rest if i < len(g)] for i in range(longest)]


def _start_postgres_gateway(
    stack: contextlib.ExitStack, result: BenchResult, tree: Path | None = None
) -> ServerProcess | None:
    """A gateway on a fresh PostgreSQL bench database (the baseline's: its own database,
    migrated by its own tree), or None with a note when PostgreSQL is not reachable."""
    try:
        url = reset_postgres_db(pg_db_name(PG_BENCH_DB, tree), tree)
    except Skip as exc:
        result.notes.append(f"session path on PostgreSQL skipped: {exc}")
        return None
    name = "gw-postgres" + ("" if tree is None else OLD)
    return stack.enter_context(gateway_server(name, SCRIPTED, url, tree=tree, **GATEWAY_ENV))
