"""``/v1/responses`` against ``/v1/chat/completions`` on the same gateway and scripted model.

Issue 25's first performance goal: the Responses front door costs no more than chat
completions for the same answer, JSON and streamed (≥ 0.95× the requests/s, added p50
≤ 0.2 ms). One gateway process (scripted model in echo mode, as bench/gateway.py) serves
every target, driven by the same generator, alternating rounds:

- ``chat`` / ``chat-stream``: ``POST /v1/chat/completions`` (``stream`` false / true);
- ``responses`` / ``responses-stream``: ``POST /v1/responses`` with ``store: false`` (nothing
  kept, as chat completions keep nothing: the like-for-like pair the goals compare);
- ``responses-stored``: ``POST /v1/responses`` with the default ``store: true`` (a stored
  run of a new session per request; shown, no goal).

Added latency at one connection (p50 of responses − p50 of chat), throughput at
``opts.connections``. With ``--baseline DIR`` the old tree's gateway serves the same targets
in the same rounds (``chat-old`` …; its responses targets only when it serves the path).
"""

from __future__ import annotations

import contextlib
import json
import math
import urllib.error
import urllib.request
from typing import Any

from bench.common import (
    OLD,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    compare,
    gateway_server,
)
from bench.load import LoadResult, LoadSpec, alternate, stalled, summarize

NAME = "responses"
SCRIPTED = [{"name": "scripted", "backend": "scripted"}]  # no replies: echoes the user
GATEWAY_ENV = {"AGENTSTATION_SANDBOX_ENABLED": "false"}
CHAT_PATH, RESPONSES_PATH = "/v1/chat/completions", "/v1/responses"
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}
RESPONSES = {"model": "scripted", "input": "hello world", "store": False}
# (target, path, body); each ``responses*`` target is compared with its chat twin.
TARGETS: list[tuple[str, str, dict[str, Any]]] = [
    ("chat", CHAT_PATH, CHAT),
    ("responses", RESPONSES_PATH, RESPONSES),
    ("chat-stream", CHAT_PATH, {**CHAT, "stream": True}),
    ("responses-stream", RESPONSES_PATH, {**RESPONSES, "stream": True}),
    ("responses-stored", RESPONSES_PATH, {"model": "scripted", "input": "hello world"}),
]
PAIRS = {"responses": "chat", "responses-stream": "chat-stream"}
MIN_RATIO, MAX_ADDED_P50_MS = 0.95, 0.2
COMPARED = ["rps", "vs_chat", "added_p50_ms", "p50_ms_c1", "cpu_us_per_req"]


def serves_responses(server: ServerProcess) -> bool:
    """Whether this gateway answers ``POST /v1/responses`` (an old tree may not)."""
    req = urllib.request.Request(
        server.base_url + RESPONSES_PATH,
        data=json.dumps(RESPONSES).encode(),
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError):
        return False


def _num(value: float, digits: int) -> float | None:
    return None if math.isnan(value) else round(value, digits)


def _row(name: str, thr: LoadResult, lat: LoadResult) -> dict[str, Any]:
    row: dict[str, Any] = {
        "target": name,
        "rps": round(thr.rps),
        "cpu_us_per_req": _num(thr.server_us_per_req, 0),
        "errors": thr.errors + lat.errors,
    }
    if not stalled(lat):
        row |= {"p50_ms_c1": round(lat.p50_ms, 3), "p99_ms_c1": round(lat.p99_ms, 3)}
    if not stalled(thr):
        row[f"p50_ms_c{thr.connections}"] = round(thr.p50_ms, 2)
    return row


def _with_ratios(rows: list[dict[str, Any]]) -> None:
    """``vs_chat`` and ``added_p50_ms`` of every responses row against its chat twin."""
    by_name = {r["target"]: r for r in rows}
    for row in rows:
        base_name = row["target"].removesuffix(OLD)
        suffix = OLD if row["target"].endswith(OLD) else ""
        twin_name = PAIRS.get(base_name) or ("chat" if base_name == "responses-stored" else None)
        twin = by_name.get((twin_name or "") + suffix)
        if twin is None or not twin["rps"]:
            continue
        row["vs_chat"] = round(row["rps"] / twin["rps"], 3)
        if "p50_ms_c1" in row and "p50_ms_c1" in twin:
            row["added_p50_ms"] = round(row["p50_ms_c1"] - twin["p50_ms_c1"], 3)


def _goals(rows: list[dict[str, Any]]) -> list[Goal]:
    goals = []
    for row in rows:
        if row["target"] not in PAIRS or "vs_chat" not in row:
            continue
        ratio, added = row["vs_chat"], row.get("added_p50_ms", float("inf"))
        what = f"{row['target']} vs {PAIRS[row['target']]}"
        goals.append(
            Goal(f"{what}: requests/s", f"≥ {MIN_RATIO}×", f"{ratio:.3f}×", ratio >= MIN_RATIO,
                 f"{ratio - MIN_RATIO:+.3f}")
        )  # fmt: skip
        margin = f"{added - MAX_ADDED_P50_MS:+.3f} ms"
        goals.append(
            Goal(f"{what}: added p50 at 1 connection", f"≤ {MAX_ADDED_P50_MS} ms",
                 f"{added:.3f} ms", added <= MAX_ADDED_P50_MS, margin)
        )  # fmt: skip
    return goals


def run(opts: BenchOptions) -> BenchResult:
    """One gateway per tree; all targets alternate (1 connection, then ``connections``)."""
    result = BenchResult(NAME)
    trees = [("", None)] + ([(OLD, opts.baseline)] if opts.baseline is not None else [])
    with contextlib.ExitStack() as stack:
        per_tree: list[list[LoadSpec]] = []
        for suffix, tree in trees:
            gw = stack.enter_context(
                gateway_server("gw-responses" + suffix, SCRIPTED, None, tree=tree, **GATEWAY_ENV)
            )
            has_responses = serves_responses(gw)
            if not has_responses:
                if not suffix:
                    raise RuntimeError("this tree's gateway does not serve POST /v1/responses")
                result.notes.append(f"{opts.baseline} serves no /v1/responses: chat targets only")
            per_tree.append(
                [
                    LoadSpec(name + suffix, gw.base_url, body, [path], gw)
                    for name, path, body in TARGETS
                    if has_responses or path == CHAT_PATH
                ]
            )
        # Each target next to its twin from the baseline tree: chat, chat-old, responses, …
        every = [s for group in per_tree for s in group]
        specs = [s for name, _, _ in TARGETS for s in _named(every, name)]
        lat = alternate(specs, opts.generator, 1, opts.dur(2.0), opts.rounds)
        thr = alternate(specs, opts.generator, opts.connections, opts.dur(), opts.rounds, 0)
    result.rows = [_row(s.name, summarize(thr[s.name]), summarize(lat[s.name])) for s in specs]
    _with_ratios(result.rows)
    result.goals = _goals(result.rows)
    result.sidebyside = compare(result.rows, "target", COMPARED)
    if any(r["errors"] for r in result.rows):
        result.notes.append("Some targets answered non-2xx (errors column): figures are suspect.")
    result.notes.append(
        f"generator {opts.generator}; {opts.rounds} alternating rounds of {opts.dur():g} s at "
        f"{opts.connections} connections and {opts.dur(2.0):g} s at 1; responses targets "
        "send store: false except responses-stored."
    )
    return result


def _named(specs: list[LoadSpec], name: str) -> list[LoadSpec]:
    """The spec named ``name`` and its baseline twin, in that order."""
    return [s for s in specs if s.name in (name, name + OLD)]
