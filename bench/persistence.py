"""Persistence: what a session turn costs over a stateless one, and whether history length matters.

Per database (SQLite, PostgreSQL), one gateway with a scripted agent:
- per-turn cost: p50 of ``POST /v1/sessions/{id}/messages`` (non-streaming) minus p50 of the same
  agent through ``/v1/chat/completions`` (no session, nothing stored), one connection each,
  alternating;
- history length: sessions pre-filled (``PUT /v1/sessions/{id}/memory``) with 10, 100 and 1,000
  messages, one timed turn at a time, the lengths interleaved; the 1,000/10 ratio must stay near 1
  (append-only memory: a turn writes its new messages, never the whole history).

With ``--baseline DIR`` that tree's gateway runs next to this one on each database (its own
PostgreSQL database, migrated by its own tree), every run and history turn alternating.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import time
from pathlib import Path
from typing import Any

from bench import plots
from bench.common import (
    HOST,
    OLD,
    PG_BENCH_DB,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    Skip,
    compare_row,
    gateway_server,
    http_json,
    pct,
    pg_db_name,
    reset_postgres_db,
)
from bench.gateway import AGENT, CHAT_BODY, GATEWAY_ENV, SCRIPTED, create_agent, session_spec
from bench.load import LoadSpec, alternate, summarize

NAME = "persistence"
HISTORY = [10, 100, 1000]
MAX_TURN_MS_PG, MAX_HISTORY_RATIO = 1.5, 1.2
# Per-turn cost: turns spread over this many sessions, so each session's history stays short
# (about 10-20 messages after a run) and the cost is persistence, not the O(history) prompt
# building that the history experiment below measures. With 8 sessions a session grew to
# ~750 messages during a run while the stateless side had 1 (the cost was inflated ~0.3 ms).
PER_TURN_SESSIONS = 256


def history(n: int) -> dict[str, list[dict[str, Any]]]:
    """A state_dict whose memory holds n alternating user/agent messages."""
    senders = ("user", AGENT)
    return {"memory": [{"content": f"message {i}", "sender": senders[i % 2]} for i in range(n)]}


def timed_turn(conn: http.client.HTTPConnection, session_id: str) -> float:
    """One non-streaming turn on a kept-alive connection; milliseconds."""
    body = json.dumps({"message": "hello world"})
    start = time.perf_counter()
    headers = {"Content-Type": "application/json"}
    conn.request("POST", f"/v1/sessions/{session_id}/messages", body, headers)
    resp = conn.getresponse()
    resp.read()
    elapsed = (time.perf_counter() - start) * 1e3
    if resp.status != 200:
        raise RuntimeError(f"turn on {session_id} answered {resp.status}")
    return elapsed


def history_turns(
    gateways: dict[str, ServerProcess], sessions: int, turns: int
) -> dict[str, dict[int, list[float]]]:
    """Turn times (ms) per gateway and history length; lengths and gateways interleaved turn
    by turn (with a baseline: this tree's turn, then the baseline's, at each step)."""
    ids: dict[str, dict[int, list[str]]] = {}
    for key, gw in gateways.items():
        ids[key] = {}
        for n in HISTORY:
            ids[key][n] = []
            for _ in range(sessions):
                sid = str(http_json("POST", f"{gw.base_url}/v1/sessions", {"agent": AGENT})["id"])
                http_json("PUT", f"{gw.base_url}/v1/sessions/{sid}/memory", history(n))
                ids[key][n].append(sid)
    times: dict[str, dict[int, list[float]]] = {k: {n: [] for n in HISTORY} for k in gateways}
    conns = {k: http.client.HTTPConnection(HOST, gw.port, timeout=60) for k, gw in gateways.items()}
    try:
        for key, conn in conns.items():  # warm-up: one turn per length, not counted
            for n in HISTORY:
                timed_turn(conn, ids[key][n][0])
        for _ in range(turns):
            for i in range(sessions):
                for n in HISTORY:
                    for key, conn in conns.items():
                        times[key][n].append(timed_turn(conn, ids[key][n][i]))
    finally:
        for conn in conns.values():
            conn.close()
    return times


def measure(
    db: str, gateways: dict[str, ServerProcess], opts: BenchOptions
) -> list[dict[str, Any]]:
    """Both experiments on each gateway (``""``: this tree's, ``"-old"``: the baseline's),
    alternating between them; rows for the table (the baseline's ``db`` is ``<db>-old``)."""
    agent_body = {**CHAT_BODY, "model": AGENT}
    stateless, session = [], []
    for key, gw in gateways.items():
        create_agent(gw.base_url)
        path = ["/v1/chat/completions"]
        stateless.append(LoadSpec(f"stateless-{db}{key}", gw.base_url, agent_body, path, gw))
        session.append(session_spec(f"session-{db}{key}", gw, PER_TURN_SESSIONS))
    runs = alternate(stateless + session, opts.generator, 1, opts.dur(), opts.rounds)
    sessions, turns = (2, 1) if opts.quick else (6, 3)
    times = history_turns(gateways, sessions, turns)
    rows = []
    for key, base_spec, sess_spec in zip(gateways, stateless, session, strict=True):
        base, sess = summarize(runs[base_spec.name]), summarize(runs[sess_spec.name])
        figures = [
            ("stateless agent turn p50 (ms)", base.p50_ms),
            ("session turn p50 (ms)", sess.p50_ms),
            ("per-turn cost p50 (ms)", sess.p50_ms - base.p50_ms),
            # Server CPU per request: what the load does not inflate as it does the WAL
            # flush's wait (the latencies above).
            ("stateless agent turn server CPU (ms)", base.server_us_per_req / 1e3),
            ("session turn server CPU (ms)", sess.server_us_per_req / 1e3),
        ]
        for n in HISTORY:
            figures.append((f"turn p50 at {n} msgs (ms)", pct(times[key][n], 50)))
            figures.append((f"turn p99 at {n} msgs (ms)", pct(times[key][n], 99)))
        ratio = pct(times[key][HISTORY[-1]], 50) / pct(times[key][HISTORY[0]], 50)
        figures.append((f"turn p50 {HISTORY[-1]}/{HISTORY[0]} msgs", ratio))
        rows += [{"db": db + key, "measure": m, "value": round(v, 3)} for m, v in figures]
    return rows


def sidebyside(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each measure of this tree's gateway against the baseline's: new, old, new/old."""
    old = {(r["db"], r["measure"]): r["value"] for r in rows}
    return [
        compare_row(r["db"], r["measure"], r["value"], old[(r["db"] + OLD, r["measure"])])
        for r in rows
        if (r["db"] + OLD, r["measure"]) in old
    ]


def _value(rows: list[dict[str, Any]], db: str, prefix: str) -> float | None:
    found = (r["value"] for r in rows if r["db"] == db and r["measure"].startswith(prefix))
    return next(found, None)


def _goals(rows: list[dict[str, Any]]) -> list[Goal]:
    goals = []
    cost = _value(rows, "postgres", "per-turn cost")
    goals.append(
        Goal("per-turn persistence p50 on PostgreSQL", f"≤ {MAX_TURN_MS_PG} ms",
             "-" if cost is None else f"{cost:.3f} ms",
             None if cost is None else cost <= MAX_TURN_MS_PG,
             "" if cost is None else f"{cost - MAX_TURN_MS_PG:+.3f} ms")
    )  # fmt: skip
    for db in ("sqlite", "postgres"):
        ratio = _value(rows, db, "turn p50 1000/10")
        goals.append(
            Goal(f"turn at 1,000 msgs vs at 10 ({db})", f"≤ {MAX_HISTORY_RATIO}×",
                 "-" if ratio is None else f"{ratio:.2f}×",
                 None if ratio is None else ratio <= MAX_HISTORY_RATIO,
                 "" if ratio is None else f"{ratio - MAX_HISTORY_RATIO:+.2f}×")
        )  # fmt: skip
    return goals


def run(opts: BenchOptions) -> BenchResult:
    """SQLite first, then PostgreSQL (skipped with a note when it is not reachable)."""
    result = BenchResult(NAME)
    trees: list[tuple[str, Path | None]] = [("", None)]
    if opts.baseline is not None:
        trees.append((OLD, opts.baseline))
    with contextlib.ExitStack() as stack:
        gws = {
            key: stack.enter_context(
                gateway_server("gw-sqlite" + key, SCRIPTED, None, tree=tree, **GATEWAY_ENV)
            )
            for key, tree in trees
        }
        result.rows += measure("sqlite", gws, opts)
    try:
        urls = {key: reset_postgres_db(pg_db_name(PG_BENCH_DB, tree), tree) for key, tree in trees}
    except Skip as exc:
        urls = {}
        result.notes.append(f"PostgreSQL skipped: {exc}")
    if urls:
        with contextlib.ExitStack() as stack:
            gws = {
                key: stack.enter_context(
                    gateway_server(
                        "gw-postgres" + key, SCRIPTED, urls[key], tree=tree, **GATEWAY_ENV
                    )
                )
                for key, tree in trees
            }
            result.rows += measure("postgres", gws, opts)
    result.goals = _goals(result.rows)
    result.sidebyside = sidebyside(result.rows)
    result.notes.append(
        "Per-turn cost = session turn p50 − stateless agent turn p50, one connection, "
        f"alternating runs, turns spread over {PER_TURN_SESSIONS} sessions (short histories); "
        "history turns: 6 sessions per length × 3 turns, lengths interleaved."
    )
    if not opts.quick and opts.baseline is None:  # a side-by-side run keeps the plain plots
        series = {}
        for db in ("sqlite", "postgres"):
            ys = [_value(result.rows, db, f"turn p50 at {n} msgs") for n in HISTORY]
            if all(y is not None for y in ys):
                series[db] = (HISTORY, [y or 0.0 for y in ys])
        result.plots.append(
            plots.lines("persistence-history", series, "Turn time vs history length",
                        "messages in session memory", "turn p50 (ms)", logx=True)
        )  # fmt: skip
    return result


# ---------------------------------------------------------------------------------------------
# Statements per turn (``python -m bench.persistence --statements [--baseline DIR]``): counted in
# PostgreSQL's own log, which the machine's load does not change, unlike the latencies above.
# The bench database gets ``log_statement = 'all'`` (that database only); the turns are the
# per-turn experiment's (one connection, round robin over 256 sessions, ``enqueue``), after one
# turn of each session; each logged statement of the database during STATEMENT_S seconds is
# counted by kind. A session not turned for ``AGENTSTATION_SESSION_CACHE_TTL_S`` (2 s) is
# looked up again: on a machine slow enough that 256 turns take over 2 s, lookups return.
# Needs the server's log readable here (a local server, PG_LOG).
PG_LOG = Path("/var/log/postgresql/postgresql-15-main.log")
STATEMENT_S = 4.0


def _kind(sql: str) -> str:
    if "agentstation_admit" in sql:
        return "admission (agentstation_admit; its commit does not wait for the WAL flush)"
    if sql.startswith("WITH msg AS"):
        return "run end (messages, events, status, run lock; durable commit)"
    if sql.startswith("SELECT s.pk") or ("FROM sessions" in sql and "JOIN agents" in sql):
        return "session lookup"
    return sql[:70]


def statements(
    tree: Path | None, db: str, durations: dict[str, list[float]] | None = None
) -> tuple[int, dict[str, int]]:
    """(turns, statements of each kind) of one gateway on its own database ``db``; with
    ``durations``, also the server's time of each statement by kind (ms, from
    ``log_min_duration_statement = 0``: its bind and execute phases; not its commit)."""
    import asyncio
    import re
    from collections import Counter

    import asyncpg

    from bench.common import PG_ADMIN_DSN

    url = reset_postgres_db(db, tree)

    async def log_statements(setting: str) -> None:
        conn = await asyncpg.connect(PG_ADMIN_DSN, timeout=5)
        try:
            await conn.execute(f"ALTER DATABASE {db} {setting}")
        finally:
            await conn.close()

    asyncio.run(log_statements("SET log_statement = 'all'"))
    if durations is not None:
        asyncio.run(log_statements("SET log_min_duration_statement = 0"))
    with gateway_server("gw-statements", SCRIPTED, url, tree=tree, **GATEWAY_ENV) as gw:
        create_agent(gw.base_url)
        ids = [
            str(http_json("POST", f"{gw.base_url}/v1/sessions", {"agent": AGENT})["id"])
            for _ in range(PER_TURN_SESSIONS)
        ]
        conn = http.client.HTTPConnection(HOST, gw.port, timeout=60)
        try:
            for sid in ids:  # warm-up: every session turned once
                _enqueue_turn(conn, sid)
            offset, n, stop_at = PG_LOG.stat().st_size, 0, time.time() + STATEMENT_S
            while time.time() < stop_at:
                _enqueue_turn(conn, ids[n % len(ids)])
                n += 1
        finally:
            conn.close()
        time.sleep(0.5)
    text = PG_LOG.read_bytes()[offset:].decode(errors="replace")
    asyncio.run(log_statements("RESET log_statement"))  # the database stays, quiet
    asyncio.run(log_statements("RESET log_min_duration_statement"))
    kinds: Counter[str] = Counter()
    for line in text.splitlines():
        if durations is not None and f"@{db} " in line:
            timed = re.search(r"duration: ([0-9.]+) ms  (?:bind|execute) [^:]*: (.*)", line)
            if timed:
                durations.setdefault(_kind(timed.group(2)), []).append(float(timed.group(1)))
                continue
        if f"@{db} " in line and (m := re.search(r"LOG:  (?:execute [^:]*|statement): (.*)", line)):
            kinds[_kind(m.group(1))] += 1
    return n, dict(kinds)


def _enqueue_turn(conn: http.client.HTTPConnection, session_id: str) -> None:
    body = json.dumps({"message": "hello world", "multitask_strategy": "enqueue"})
    conn.request(
        "POST", f"/v1/sessions/{session_id}/messages", body, {"Content-Type": "application/json"}
    )
    resp = conn.getresponse()
    resp.read()
    if resp.status != 200:
        raise RuntimeError(f"turn on {session_id} answered {resp.status}")


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description="PostgreSQL statements per persisted turn")
    parser.add_argument("--statements", action="store_true", required=True)
    parser.add_argument("--baseline", type=Path, default=None)
    parser.add_argument(
        "--durations", action="store_true", help="also the server's time per statement kind"
    )
    args = parser.parse_args()
    trees: list[tuple[str, Path | None]] = [("this tree", None)]
    if args.baseline is not None:
        trees.append(("baseline", args.baseline.resolve()))
    for label, tree in trees:
        timed: dict[str, list[float]] | None = {} if args.durations else None
        db = pg_db_name(PG_BENCH_DB + "_statements", tree)
        turns, kinds = statements(tree, db, timed)
        print(f"{label}: {turns} turns")
        for kind, count in sorted(kinds.items(), key=lambda kv: -kv[1]):
            print(f"  {count / turns:6.3f} per turn  ({count:5d})  {kind}")
        for kind, times in sorted((timed or {}).items(), key=lambda kv: -sum(kv[1])):
            times.sort()
            print(f"  server time (bind + execute) p50 {times[len(times) // 2]:.3f} ms, "
                  f"sum {sum(times) / turns:.3f} ms per turn: {kind}")  # fmt: skip


if __name__ == "__main__":
    main()
