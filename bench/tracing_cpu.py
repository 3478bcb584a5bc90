"""Tracing's CPU per request, in process: the chat, agent and session paths with OpenTelemetry
not installed, off, or on (the SDK's batch exporter to a local OTLP sink), one gateway per
process, no sockets on the request side.

``python -m bench.tracing_cpu [--modes none,on] [--trees DIR,...] [--n 2000] [--rounds 4]``
runs one child process per (tree, mode), all alive at once, and alternates them round by round
(each child serves ``n / rounds`` requests of each path per round, then waits for the next
round), so a busy machine slows them alike. A child builds the gateway as ``agentstation
serve`` does (``app.cli.build_app``: SQLite, the scripted model in echo mode, the sandbox off),
calls it through ASGI with the request wrk sends (bench/stateless_cpu.py's ``call``) and counts
``time.process_time`` (every thread: the exporter's encoding and HTTP posts included; a round
ends with ``force_flush``, so the spans it made are exported inside it). Prints CPU µs per
request and the ratio to the first (tree, mode).

``--profile DIR``: each child also runs cProfile over one extra window per path and writes
``DIR/<tree>-<mode>-<path>.prof`` (``python -m pstats``), for where the time goes.
``--spans``: the SDK's pieces per span measured alone (``spans_alone``), no gateway.
``--instructions``: the children run under valgrind's callgrind, instrumented only while they
serve (``--rounds`` windows per path, the median kept): machine instructions per request, the
load-proof figure (slow: ≈ 1 min to start, ≈ 10 ms per request).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.callgrind import control, dumped
from bench.common import BENCH_DIR, ROOT, uvicorn_server

PATHS = ("chat", "agent", "session")
AGENT = "bench-agent"
SESSIONS = 64
CHAT = json.dumps(
    {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}
).encode()
AGENT_BODY = json.dumps(
    {"model": AGENT, "messages": [{"role": "user", "content": "hello world"}]}
).encode()
Figures = dict[str, dict[str, list[float]]]
TURN = json.dumps({"message": "hello world", "multitask_strategy": "enqueue"}).encode()


# -- the child: one gateway, commands on stdin, figures on stdout -------------------------------
async def _child(profile_dir: str | None, label: str) -> None:
    from app.cli import build_app
    from app.settings import Settings
    from bench.stateless_cpu import call, served_as_uvicorn

    gateway = await asyncio.to_thread(build_app, Settings())
    async with gateway.router.lifespan_context(gateway):
        served = served_as_uvicorn(gateway)
        spec = {"name": AGENT, "spec": {"kind": "agent", "model": "scripted"}}
        await call(served, "/v1/agents", json.dumps(spec).encode())
        ids = []
        for _ in range(SESSIONS):
            made = await call(served, "/v1/sessions", json.dumps({"agent": AGENT}).encode())
            ids.append(json.loads(made)["id"])
        tracing = getattr(gateway.state.ops, "tracing", None)
        if tracing is not None and os.environ.get("BENCH_TRACING_VARIANT"):
            _variant(tracing.provider, os.environ["BENCH_TRACING_VARIANT"])

        def flush() -> None:
            if tracing is not None:
                tracing.provider.force_flush()

        counter = 0

        async def one(path: str) -> None:
            nonlocal counter
            if path == "chat":
                await call(served, "/v1/chat/completions", CHAT)
            elif path == "agent":
                await call(served, "/v1/chat/completions", AGENT_BODY)
            else:
                counter += 1
                await call(served, f"/v1/sessions/{ids[counter % SESSIONS]}/messages", TURN)

        for path in PATHS:  # warm-up
            for _ in range(200):
                await one(path)
        flush()
        from app.cli import freeze_gc_heap

        freeze_gc_heap(None)  # as ``serve`` does once started (gc.freeze, gen0 threshold)
        gc_time = [0.0, 0.0]

        def gc_clock(phase: str, info: dict[str, Any]) -> None:
            if phase == "start":
                gc_time[1] = time.process_time()
            else:
                gc_time[0] += time.process_time() - gc_time[1]

        gc.callbacks.append(gc_clock)
        print(json.dumps({"ready": os.getpid()}), flush=True)
        loop = asyncio.get_running_loop()
        while line := await loop.run_in_executor(None, sys.stdin.readline):
            command = json.loads(line)
            path, n = command["path"], command["n"]
            if command.get("profile") and profile_dir:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
                for _ in range(n):
                    await one(path)
                flush()
                prof.disable()
                prof.dump_stats(f"{profile_dir}/{label}-{path}.prof")
                print(json.dumps({"done": True}), flush=True)
                continue
            start, gc_before = time.process_time(), gc_time[0]
            for _ in range(n):
                await one(path)
            flush()
            spent = time.process_time() - start
            print(json.dumps({"cpu": spent, "gc": gc_time[0] - gc_before}), flush=True)


def _variant(provider: Any, variant: str) -> None:
    """For the breakdown: ``noexport`` (the batch processor hands spans to an exporter that
    drops them: no encoding, no HTTP) or ``noproc`` (no span processor: spans are made and
    ended, nothing queued)."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    active = provider._active_span_processor  # the tracers hold this one: change its list
    for processor in active._span_processors:
        processor.shutdown()
    active._span_processors = (BatchSpanProcessor(Dropped()),) if variant == "noexport" else ()


# -- the parent ----------------------------------------------------------------------------------
class Child:
    """One (tree, mode) gateway process."""

    def __init__(self, tree: Path, mode: str, sink: str, args: argparse.Namespace) -> None:
        self.label = f"{tree.name}-{mode}"
        env = {**os.environ, "AGENTSTATION_SANDBOX_ENABLED": "false"}
        env["AGENTSTATION_LOG_LEVEL"] = "warning"
        db = tempfile.mkdtemp(prefix="bench-tcpu-")
        env["AGENTSTATION_DATABASE_URL"] = f"sqlite+aiosqlite:///{db}/bench.db"
        env["AGENTSTATION_MODELS"] = json.dumps([{"name": "scripted", "backend": "scripted"}])
        for key in list(env):
            if key.startswith("OTEL_"):
                del env[key]
        path = [str(tree), str(ROOT)]
        if mode == "none":
            path.insert(0, str(BENCH_DIR / "no_otel_site"))
        elif mode.startswith("on") or mode == "sampled":
            if "-" in mode:  # on-noexport, on-noproc: the breakdown's variants (_variant)
                env["BENCH_TRACING_VARIANT"] = mode.split("-", 1)[1]
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = sink
            env["OTEL_SERVICE_NAME"] = "agentstation-bench"
            if mode == "sampled":
                env["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
                env["OTEL_TRACES_SAMPLER_ARG"] = "0.1"
        env["PYTHONPATH"] = ":".join(path)
        # Run as a file (a baseline tree may not have it), without its folder on sys.path.
        me = str(BENCH_DIR / "tracing_cpu.py")
        script = f"import runpy; runpy.run_path({me!r}, run_name='__main__')"
        cmd = [sys.executable, "-c", script, "--child", self.label]
        if args.profile:
            cmd += ["--profile", str(args.profile)]
        self.callgrind: Path | None = None
        if args.instructions:
            self.callgrind = Path(tempfile.mkdtemp(prefix="bench-tcg-"))
            cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                   f"--callgrind-out-file={self.callgrind}/cg.%p", *cmd]  # fmt: skip
        self.proc = subprocess.Popen(
            cmd, cwd=tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        self.pid = 0

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError(f"{self.label} exited ({self.proc.wait()})")
            if line.startswith("{"):
                return dict(json.loads(line))

    def ready(self) -> None:
        self.pid = int(self.read()["ready"])  # the python process (valgrind's own pid)

    def send(self, path: str, n: int, profile: bool = False) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"path": path, "n": n, "profile": profile}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def instructions(self, path: str, n: int) -> tuple[int, float]:
        """Instructions of ``n`` requests of ``path`` (callgrind, zeroed before, dumped after)
        and the window's wall time."""
        control(self.pid, "-z")
        start = time.monotonic()
        self.send(path, n)
        wall = time.monotonic() - start
        control(self.pid, "-d")
        return self.dumped(), wall

    def dumped(self) -> int:
        """Instructions of the newest dump."""
        assert self.callgrind is not None
        return dumped(self.callgrind, self.pid)

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        try:
            self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        if self.callgrind is not None:
            shutil.rmtree(self.callgrind, ignore_errors=True)


def run(args: argparse.Namespace) -> None:
    targets: list[tuple[Path, str]] = []
    for spec in args.trees.split(",") if args.trees else [str(ROOT)]:
        tree, _, own = spec.partition(":")  # DIR:none+on: that tree's own modes
        modes = own.split("+") if own else args.modes.split(",")
        targets += [(Path(tree).resolve(), mode) for mode in modes]
    with contextlib.ExitStack() as stack:
        sink = stack.enter_context(uvicorn_server("otlp-sink", "bench.baselines.otlp_sink:app"))
        children = [Child(tree, mode, sink.base_url, args) for tree, mode in targets]
        for child in children:
            stack.callback(child.close)
        for child in children:
            child.ready()
        if args.instructions:
            for child in children:
                control(child.pid, "-i", "on")
        figures: Figures = {c.label: {p: [] for p in PATHS} for c in children}
        gcs: Figures = {c.label: {p: [] for p in PATHS} for c in children}
        walls: Figures = {c.label: {p: [] for p in PATHS} for c in children}
        per = max(1, args.n // args.rounds)
        # A session turn costs ~10 chat requests: fewer of them per window under callgrind.
        n_of = {"chat": per, "agent": per, "session": max(1, per // args.session_div)}
        for _ in range(args.rounds):
            for path in PATHS:
                for child in children:
                    if args.instructions:
                        counted, wall = child.instructions(path, n_of[path])
                        figures[child.label][path].append(counted)
                        walls[child.label][path].append(wall)
                    else:
                        got = child.send(path, n_of[path])
                        figures[child.label][path].append(got["cpu"])
                        gcs[child.label][path].append(got["gc"])
        if args.instructions:
            # The gateways' own timers (pollers, heartbeats) run by wall time, and a window
            # under callgrind lasts seconds: an idle window per child measures their rate,
            # subtracted from each window by its wall time (as bench/responses_calls.py).
            idle_s = min(60.0, max(w for c in walls.values() for ws in c.values() for w in ws))
            for child in children:  # all idle at once
                control(child.pid, "-z")
            time.sleep(idle_s)
            for child in children:
                control(child.pid, "-d")
                rate = child.dumped() / idle_s
                for path in PATHS:
                    counts, times = figures[child.label][path], walls[child.label][path]
                    figures[child.label][path] = [
                        (c - rate * w) / n_of[path] for c, w in zip(counts, times, strict=True)
                    ]
                print(f"{child.label}: idle {rate / 1e6:.1f}M instructions/s", flush=True)
        else:
            for label, paths in figures.items():
                for path in PATHS:
                    paths[path] = [cpu / n_of[path] for cpu in paths[path]]
                    gcs[label][path] = [g / n_of[path] for g in gcs[label][path]]
        if args.profile:
            args.profile.mkdir(parents=True, exist_ok=True)
            for path in PATHS:
                for child in children:
                    child.send(path, n_of[path], profile=True)
    unit = "instructions" if args.instructions else "µs CPU"
    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}; {args.rounds} "
          f"rounds of {n_of} requests; median of rounds, {unit} per request")  # fmt: skip
    ref = children[0].label
    print(f"{'target':28s} " + " ".join(f"{p:>22s}" for p in PATHS))
    for child in children:
        cells = []
        for path in PATHS:
            value = statistics.median(figures[child.label][path])
            base = statistics.median(figures[ref][path])
            shown = f"{value:,.0f}" if args.instructions else f"{value * 1e6:,.1f}"
            cells.append(f"{shown} ({value / base:.3f}×)")
        print(f"{child.label:28s} " + " ".join(f"{c:>22s}" for c in cells))
        if not args.instructions:
            spent = [statistics.median(gcs[child.label][p]) * 1e6 for p in PATHS]
            print(f"{'  of which gc':28s} " + " ".join(f"{g:>22.1f}" for g in spent))


def spans_alone(sink: str, n: int = 5000) -> None:
    """``--spans``: the SDK's pieces per span, alone (CPU µs, median of 5 alternating rounds):
    a chat span's start and end (4 attributes at start, 4 at the end, the TTFT event) without
    a processor and with the batch processor's queue; its encoding in a batch of 512 with the
    SDK's ``Resource`` and with ``_hashed_resource``; the exporter's encode + post per span at
    a batch of 32 and 512; the context, sampler and id calls a span makes."""
    from opentelemetry import context, trace
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
    from opentelemetry.sdk.trace.export import (
        BatchSpanProcessor,
        SimpleSpanProcessor,
        SpanExporter,
        SpanExportResult,
    )

    from app.ops.tracing import _hashed_resource

    class Kept(SpanExporter):
        def __init__(self) -> None:
            self.spans: list[ReadableSpan] = []

        def export(self, spans: Any) -> SpanExportResult:
            self.spans.extend(spans)
            return SpanExportResult.SUCCESS

    start = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted",
             "gen_ai.request.model": "scripted", "gen_ai.conversation.id": "3f2a"}  # fmt: skip
    end = {"gen_ai.response.model": "scripted", "gen_ai.response.finish_reasons": ["stop"],
           "gen_ai.usage.input_tokens": 3, "gen_ai.usage.output_tokens": 4}  # fmt: skip
    sdk = Resource.create({"service.name": "bench"})
    hashed = _hashed_resource(sdk.attributes, sdk.schema_url)

    def tracer(resource: Any, processor: Any = None) -> Any:
        provider = TracerProvider(resource=resource)
        if processor is not None:
            provider.add_span_processor(processor)
        return provider, provider.get_tracer("bench")

    def chat_span(t: Any) -> None:
        span = t.start_span("chat scripted", attributes=start)
        span.add_event("gen_ai.first_token", {"gen_ai.server.time_to_first_token": 0.01})
        span.set_attributes(end)
        span.end()

    def made(resource: Any) -> list[ReadableSpan]:
        kept = Kept()
        _, t = tracer(resource, SimpleSpanProcessor(kept))
        for _ in range(512):
            chat_span(t)
        return kept.spans

    _, bare = tracer(sdk)

    class Dropped(SpanExporter):
        def export(self, spans: Any) -> SpanExportResult:
            return SpanExportResult.SUCCESS

    queued_provider, queued = tracer(sdk, BatchSpanProcessor(Dropped()))
    batch_sdk, batch_hashed = made(sdk), made(hashed)
    exporter = OTLPSpanExporter(endpoint=f"{sink}/v1/traces")
    parent = trace.set_span_in_context(bare.start_span("request"))
    provider = TracerProvider()
    ids = provider.id_generator

    def attach() -> None:
        context.detach(context.attach(parent))

    pieces: dict[str, tuple[Any, int, int]] = {  # name: (call, repeats, spans per call)
        "chat span start+end, no processor": (lambda: chat_span(bare), n, 1),
        "chat span start+end, batch processor queue": (lambda: chat_span(queued), n, 1),
        "encode, batch of 512, SDK Resource": (lambda: encode_spans(batch_sdk), 4, 512),
        "encode, batch of 512, hashed resource": (lambda: encode_spans(batch_hashed), 4, 512),
        "export (encode + post), batch of 32": (lambda: exporter.export(batch_hashed[:32]), 20, 32),
        "export (encode + post), batch of 512": (lambda: exporter.export(batch_hashed), 4, 512),
        "context attach + detach": (attach, n, 1),
        "sampler (parent-based, always on)": (
            lambda: provider.sampler.should_sample(parent, 1, "x", attributes=start),
            n,
            1,
        ),
        "trace id + span id": (lambda: ids.generate_trace_id() + ids.generate_span_id(), n, 1),
    }
    spent: dict[str, list[float]] = {name: [] for name in pieces}
    for _ in range(5):
        for name, (call, repeats, per_call) in pieces.items():
            began = time.process_time()
            for _ in range(repeats):
                call()
            spent[name].append((time.process_time() - began) / repeats / per_call)
        queued_provider.force_flush()
    for name, values in spent.items():
        print(f"{name:48s} {statistics.median(values) * 1e6:7.2f} µs per span")


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.tracing_cpu")
    parser.add_argument("--modes", default="none,on", help="of none, off, on, sampled")
    parser.add_argument(
        "--trees", default="", help="checkouts, comma-separated (this one); DIR:none+on: its modes"
    )
    parser.add_argument("--n", type=int, default=2000, help="requests per path and target")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--session-div", type=int, default=1, help="session windows: n / this")
    parser.add_argument("--profile", type=Path, default=None)
    parser.add_argument("--instructions", action="store_true", help="callgrind (module doc)")
    parser.add_argument("--spans", action="store_true", help="the SDK's pieces per span")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.spans:
        with uvicorn_server("otlp-sink", "bench.baselines.otlp_sink:app") as sink:
            spans_alone(sink.base_url)
        return
    if args.child is not None:
        profile = str(args.profile) if args.profile else None
        asyncio.run(_child(profile, args.child))
        return
    run(args)


if __name__ == "__main__":
    main()
