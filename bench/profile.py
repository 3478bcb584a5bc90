"""Profile the gateway under load with py-spy: where a request's CPU goes.

``python -m bench.profile chat|agent|session|proxy|stream|responses [--db sqlite|postgres]
[--seconds 5]`` (``responses``: ``POST /v1/responses``, ``store: false``, bench/responses.py's body)
starts the gateway as the benchmarks do, drives it with wrk at 32 connections (``stream``:
``--connections`` concurrent 20 tokens/s SSE streams) while py-spy
samples the thread holding the GIL (``--gil``: Python CPU, not threads idling in aiosqlite
or asyncpg queues), and prints the functions with the most samples (self and inclusive).
Raw stacks go to bench/results/profile-<target>.txt (for flamegraph.pl or speedscope).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench.common import RESULTS_DIR, VENV_BIN, gateway_server, reset_postgres_db, uvicorn_server
from bench.gateway import AGENT, CHAT_BODY, GATEWAY_ENV, SCRIPTED, create_agent, session_spec
from bench.load import LoadSpec, run_load
from bench.proxy import BODY as PROXY_BODY
from bench.proxy import mock_model
from bench.responses import RESPONSES, RESPONSES_PATH
from bench.streaming import STREAM_MODEL, run_level

_LINE = re.compile(r":\d+\)$")


def top_functions(raw: str, limit: int = 25) -> str:
    """Self and inclusive sample shares per function from py-spy's raw (collapsed) output."""
    self_c: collections.Counter[str] = collections.Counter()
    incl_c: collections.Counter[str] = collections.Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        n = int(count)
        frames = [_LINE.sub(")", f) for f in stack.split(";")]
        total += n
        self_c[frames[-1]] += n
        for frame in set(frames):
            incl_c[frame] += n
    out = [f"{total} samples"]
    for title, counter in (("self", self_c), ("inclusive", incl_c)):
        out.append(f"\n== top {limit} by {title} time ==")
        for frame, n in counter.most_common(limit if title == "self" else limit * 3):
            if title == "inclusive" and not any(p in frame for p in ("app/", "agents/")):
                continue  # inclusive view: only our code (the rest is the event loop)
            out.append(f"{n / max(total, 1):6.1%}  {frame}")
    return "\n".join(out)


def _target(name: str, db: str, stack: contextlib.ExitStack) -> tuple[int, LoadSpec]:
    env = dict(GATEWAY_ENV)
    models = SCRIPTED
    if name == "stream":
        gw = stack.enter_context(gateway_server("gw-profile", STREAM_MODEL, **env))
        return gw.proc.pid if gw.proc else 0, LoadSpec(name, gw.base_url, {}, [], gw)
    if name == "proxy":
        mock = stack.enter_context(uvicorn_server("mock", "bench.baselines.mock_openai:app"))
        models, env["BENCH_MOCK_KEY"] = mock_model(mock.base_url), "sk-bench"
    url = reset_postgres_db() if db == "postgres" else None
    gw = stack.enter_context(gateway_server("gw-profile", models, url, **env))
    path = ["/v1/chat/completions"]
    if name == "proxy":
        return gw.proc.pid if gw.proc else 0, LoadSpec(name, gw.base_url, PROXY_BODY, path)
    create_agent(gw.base_url)
    spec = {
        "chat": LoadSpec(name, gw.base_url, CHAT_BODY, path),
        "agent": LoadSpec(name, gw.base_url, {**CHAT_BODY, "model": AGENT}, path),
        "responses": LoadSpec(name, gw.base_url, RESPONSES, [RESPONSES_PATH]),
    }.get(name) or session_spec(name, gw, 64)
    return gw.proc.pid if gw.proc else 0, spec


def main(argv: list[str] | None = None) -> int:
    """Start, load, sample, summarize."""
    parser = argparse.ArgumentParser(prog="python -m bench.profile")
    parser.add_argument(
        "target", choices=["chat", "agent", "session", "proxy", "stream", "responses"]
    )
    parser.add_argument("--db", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--seconds", type=int, default=5)
    parser.add_argument("--connections", type=int, default=32)
    args = parser.parse_args(argv)
    raw_path = Path(tempfile.mkdtemp(prefix="bench-prof-")) / "stacks.txt"
    with contextlib.ExitStack() as stack:
        pid, spec = _target(args.target, args.db, stack)
        if args.target != "stream":
            run_load("wrk", spec, args.connections, 1)  # warm-up
        cmd = [str(VENV_BIN / "py-spy"), "record", "-p", str(pid), "-r", "250", "-f", "raw"]
        cmd += ["-d", str(args.seconds), "-o", str(raw_path), "--nonblocking", "--gil"]
        spy = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if args.target == "stream":
            assert spec.server is not None
            words = int(args.seconds * 20)
            row = asyncio.run(run_level("gateway", spec.server, args.connections, words))
            summary = f"stream: {row}"
        else:
            result = run_load("wrk", spec, args.connections, args.seconds)
            summary = (
                f"{spec.name}: {result.rps:.0f} req/s, p50 {result.p50_ms:.2f} ms, "
                f"errors {result.errors}"
            )
        spy.communicate(timeout=args.seconds + 30)
    raw = raw_path.read_text() if raw_path.exists() else ""
    RESULTS_DIR.mkdir(exist_ok=True)
    label = f"{args.target}-{args.db}" if args.target == "session" else args.target
    (RESULTS_DIR / f"profile-{label}.txt").write_text(raw)
    print(summary)
    print(top_functions(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
