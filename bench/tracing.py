"""Tracing overhead (issue 28): the gateway with OpenTelemetry not installed, installed but off,
and on (batch exporter to a local collector), side by side in one run.

Targets, each path on the three gateways, alternating (A B C A B C …), one uvicorn worker each:
``chat`` (``/v1/chat/completions``, scripted model in echo mode), ``agent`` (the same with
``model`` = an agent) and ``session`` (``POST /v1/sessions/{id}/messages`` over 128 sessions,
SQLite: admission, store and run spans) on

- ``none``: OpenTelemetry not installed (``bench/no_otel_site``: any ``import opentelemetry``
  fails, as in a venv without it) — the reference;
- ``off``: installed, no ``OTEL_*`` variable (as shipped);
- ``on``: ``OTEL_EXPORTER_OTLP_ENDPOINT`` = a local OTLP/HTTP sink (bench/baselines/otlp_sink.py),
  the SDK's batch span processor, every span sampled;
- ``sampled``: the same with ``OTEL_TRACES_SAMPLER=parentbased_traceidratio`` at 10 %.

Goals: off ≥ 0.99× and on ≥ 0.9× the ``none`` throughput on each path. ``--baseline DIR`` adds
``off-old`` and ``on-old``: that tree (e.g. the commit before a tracing change) served as is,
without and with tracing on, so a change to tracing's cost is measured side by side.

    .venv/bin/python -m bench.tracing                 # ≈ 4 min on 2 quiet cores
    .venv/bin/python -m bench.tracing --quick         # smoke run, writes nothing
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path
from typing import Any

from bench import report
from bench.common import (
    BENCH_DIR,
    ROOT,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    baseline_tree,
    gateway_server,
    http_json,
    uvicorn_server,
)
from bench.gateway import AGENT, CHAT_BODY, CHAT_PATH, SCRIPTED, create_agent, create_sessions
from bench.load import LoadResult, LoadSpec, alternate, stalled, summarize

NAME = "tracing"
SESSIONS = 128
MIN_OFF, MIN_ON = 0.99, 0.90
BASE_ENV = {
    "AGENTSTATION_SANDBOX_ENABLED": "false",
    "OTEL_SDK_DISABLED": "",
    "OTEL_TRACES_SAMPLER": "parentbased_always_on",  # the default, whatever the shell says
    "OTEL_TRACES_SAMPLER_ARG": "",
}
# Every OTEL_* variable a developer's shell may hold is blanked for the untraced gateways.
OTEL_BLANK = {
    "OTEL_EXPORTER_OTLP_ENDPOINT": "",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "",
    "OTEL_TRACES_EXPORTER": "",
}
PATHS = ("chat", "agent", "session")


def _gateway(name: str, mode: str, sink: ServerProcess | None, tree: Path | None) -> Any:
    env = {**BASE_ENV, **OTEL_BLANK}
    if mode == "none":
        env["PYTHONPATH"] = f"{BENCH_DIR / 'no_otel_site'}:{ROOT}"
    elif mode in ("on", "sampled"):
        assert sink is not None
        env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink.base_url
        env["OTEL_SERVICE_NAME"] = "agentstation-bench"
        if mode == "sampled":
            env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
            env["OTEL_TRACES_SAMPLER_ARG"] = "0.1"
    server = gateway_server(name, SCRIPTED, None, tree=tree, **env)
    server.ready_timeout_s = 300.0  # six gateways start at once: slow on a busy machine
    return server


def _specs(mode: str, server: ServerProcess) -> list[LoadSpec]:
    create_agent(server.base_url)
    ids = create_sessions(server.base_url, SESSIONS)
    body = {"message": "hello world", "multitask_strategy": "enqueue"}
    return [
        LoadSpec(f"chat-{mode}", server.base_url, CHAT_BODY, [CHAT_PATH], server),
        LoadSpec(
            f"agent-{mode}", server.base_url, {**CHAT_BODY, "model": AGENT}, [CHAT_PATH], server
        ),
        LoadSpec(
            f"session-{mode}",
            server.base_url,
            body,
            [f"/v1/sessions/{i}/messages" for i in ids],
            server,
        ),
    ]


def _row(name: str, thr: LoadResult, lat: LoadResult, ref: LoadResult) -> dict[str, Any]:
    row: dict[str, Any] = {
        "target": name,
        "rps": round(thr.rps),
        "vs_none": round(thr.rps / ref.rps, 3) if ref.rps else None,
        "cpu_us_per_req": round(thr.server_us_per_req) if thr.rps else None,
        "cpu_vs_none": (
            round(thr.server_us_per_req / ref.server_us_per_req, 3) if ref.rps and thr.rps else None
        ),
        "p50_ms_c1": round(lat.p50_ms, 3) if not stalled(lat) else None,
        "errors": thr.errors + lat.errors,
    }
    return row


def run(opts: BenchOptions) -> BenchResult:
    """Start the sink and the gateways, alternate the load per path, compare with ``none``."""
    result = BenchResult(NAME)
    old = ["off-old", "on-old"] if opts.baseline is not None else []
    modes = ["none", "off", "on", "sampled", *old]
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(uvicorn_server("otlp-sink", "bench.baselines.otlp_sink:app"))
        by_mode: dict[str, list[LoadSpec]] = {}
        for mode in modes:
            tree = opts.baseline if mode.endswith("-old") else None
            server = stack.enter_context(
                _gateway(f"gw-{mode}", mode.removesuffix("-old"), sink, tree)
            )
            by_mode[mode] = _specs(mode, server)
        # Per path, its targets side by side: chat-none chat-off chat-on, agent-none, …
        specs = [by_mode[m][i] for i in range(len(PATHS)) for m in modes]
        lat = alternate(specs, opts.generator, 1, opts.dur(2.0), opts.rounds)
        thr = alternate(specs, opts.generator, opts.connections, opts.dur(), opts.rounds, 0)
        exported = http_json("GET", f"{sink.base_url}/stats")
    t = {k: summarize(v) for k, v in thr.items()}
    la = {k: summarize(v) for k, v in lat.items()}
    for spec in specs:
        path = spec.name.split("-", 1)[0]
        result.rows.append(_row(spec.name, t[spec.name], la[spec.name], t[f"{path}-none"]))
    for row in result.rows:
        path, mode = row["target"].split("-", 1)
        want = {"off": MIN_OFF, "on": MIN_ON}.get(mode)  # sampled: a figure, no goal
        if want is None or row["vs_none"] is None:
            continue
        result.goals.append(
            Goal(
                f"{path}: tracing {mode} vs not installed (throughput)",
                f"≥ {want:.2f}×",
                f"{row['vs_none']:.3f}×",
                row["vs_none"] >= want,
                f"{row['vs_none'] - want:+.3f}",
            )
        )
    result.notes.append(
        f"on: the local sink received {exported['requests']} OTLP export requests "
        f"({exported['bytes'] / 1e6:.1f} MB) during the run."
    )
    result.notes.append(
        f"{opts.generator} generator; {opts.rounds} alternating rounds of {opts.dur():.0f} s at "
        f"{opts.connections} connections and {opts.dur(2.0):.0f} s at 1. cpu_vs_none: server CPU "
        "per request against the none twin (steadier than req/s on a busy machine)."
    )
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="smoke run; writes nothing")
    parser.add_argument("--duration", type=float, default=5.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--generator", choices=["auto", "wrk", "aiohttp"], default="auto")
    parser.add_argument("--baseline", type=Path, default=None)
    args = parser.parse_args(argv)
    from bench.load import pick_generator

    opts = BenchOptions(
        quick=args.quick,
        duration_s=args.duration,
        rounds=1 if args.quick else args.rounds,
        connections=args.connections,
        generator=pick_generator(args.generator),
        baseline=baseline_tree(args.baseline) if args.baseline else None,
    )
    result = run(opts)
    command = " ".join([".venv/bin/python -m bench.tracing", *(argv or sys.argv[1:])])
    result.notes.append(f"command: {command}")
    print(report.render(result), flush=True)
    if not opts.quick:
        report.write_json(result)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
