"""``python -m bench [names…]``: run the benchmarks, print the table, write results and README.

Examples: ``python -m bench`` (all), ``python -m bench gateway proxy``, ``python -m bench --quick``.
``--baseline DIR``: another checkout (``git worktree add /tmp/base <commit>``) whose gateway runs
side by side with this tree's in every benchmark that serves one, in the same rounds; each
benchmark then writes bench/results/<name>-sidebyside.json, the README's generated block is
left alone, and a new / old / new÷old table of every figure is printed at the end (and written
to bench/results/sidebyside.md).
"""

from __future__ import annotations

import argparse
import importlib
import os
import subprocess
import sys
import time
import traceback

from bench import report
from bench.common import RESULTS_DIR, ROOT, BenchOptions, BenchResult, Skip, baseline_tree
from bench.load import pick_generator

# Run order: cheap and self-contained first. engine, sandbox and http_client belong to
# teammates; they run through ``run(opts)`` when they have one, else as scripts.
BENCHMARKS = [
    "loadgen",
    "gateway",
    "proxy",
    "streaming",
    "persistence",
    "turn_cpu",
    "new_session",
    "http_client",
    "sandbox",
    "engine",
    "responses",
    "agentic",
]
SCRIPT_TIMEOUT_S = 300


def run_script(name: str) -> BenchResult:
    """Run a module that has only ``main()`` as ``python -m bench.<name>``; keep its output."""
    result = BenchResult(name)
    try:
        done = subprocess.run(
            [sys.executable, "-m", f"bench.{name}"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=SCRIPT_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        result.skipped = f"python -m bench.{name} ran past {SCRIPT_TIMEOUT_S} s"
        return result
    tail = (done.stdout + done.stderr).strip().splitlines()[-40:]
    result.output = "\n".join(tail)
    if done.returncode != 0:
        result.notes.append(f"python -m bench.{name} exited {done.returncode}")
    return result


def run_one(name: str, opts: BenchOptions) -> BenchResult:
    """Import bench.<name> and run it; a missing piece becomes a skipped result, never a crash."""
    start = time.monotonic()
    try:
        module = importlib.import_module(f"bench.{name}")
    except ImportError as exc:
        return BenchResult(name, skipped=f"bench/{name}.py is missing or broken: {exc}")
    try:
        if hasattr(module, "run"):
            result: BenchResult = module.run(opts)
        elif hasattr(module, "main"):
            result = run_script(name)
        else:
            result = BenchResult(name, skipped=f"bench.{name} has neither run() nor main()")
    except Skip as exc:
        result = BenchResult(name, skipped=str(exc))
    except Exception as exc:  # one broken benchmark must not lose the others' figures
        traceback.print_exc()
        first = (str(exc).strip().splitlines() or [""])[0]
        result = BenchResult(name, skipped=f"failed: {type(exc).__name__}: {first}"[:300])
    result.elapsed_s = time.monotonic() - start
    return result


def parse_args(argv: list[str]) -> tuple[list[str], BenchOptions, bool]:
    """Names to run, options, and whether to update the README."""
    parser = argparse.ArgumentParser(prog="python -m bench", description=__doc__)
    parser.add_argument("names", nargs="*", help=f"benchmarks (default all): {BENCHMARKS}")
    parser.add_argument("--quick", action="store_true", help="tiny loads: a smoke run")
    parser.add_argument("--duration", type=float, default=3.0, help="seconds per load run")
    parser.add_argument("--rounds", type=int, default=2, help="alternating rounds per target")
    parser.add_argument("--connections", type=int, default=32, help="connections for throughput")
    parser.add_argument("--generator", choices=["auto", "wrk", "aiohttp"], default="auto")
    parser.add_argument("--no-readme", action="store_true", help="leave bench/README.md alone")
    parser.add_argument(
        "--baseline",
        metavar="DIR",
        help="another checkout whose gateway runs side by side (e.g. a worktree of the old tree)",
    )
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark(s) {unknown}; choose from {BENCHMARKS}")
    baseline = None
    if args.baseline is not None:
        try:
            baseline = baseline_tree(args.baseline)
        except ValueError as exc:
            parser.error(str(exc))
    opts = BenchOptions(
        quick=args.quick,
        duration_s=args.duration,
        rounds=1 if args.quick else args.rounds,
        connections=args.connections,
        generator=pick_generator(args.generator),
        baseline=baseline,
    )
    write_readme = not (args.no_readme or args.quick or baseline is not None)
    return args.names or BENCHMARKS, opts, write_readme


def main(argv: list[str] | None = None) -> int:
    """Run, print, write; exit 0 even when goals are missed (the table says so)."""
    os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
    os.environ.setdefault("DO_NOT_TRACK", "1")
    names, opts, write_readme = parse_args(sys.argv[1:] if argv is None else argv)
    results = []
    started = time.monotonic()
    for name in names:
        print(f"== {name} …", flush=True)
        result = run_one(name, opts)
        print(report.render(result), flush=True)
        results.append(result)
        if not opts.quick:
            report.write_json(result, "" if opts.baseline is None else "-sidebyside")
    print(report.console(results))
    if opts.baseline is not None:
        table = report.sidebyside_table(results)
        print(f"\n## Side by side: this tree (new) vs {opts.baseline} (old)\n\n{table}")
        if not opts.quick:
            RESULTS_DIR.mkdir(exist_ok=True)
            (RESULTS_DIR / "sidebyside.md").write_text(table + "\n")
    print(f"total: {time.monotonic() - started:.0f} s")
    if write_readme:
        merged = report.load_previous(BENCHMARKS)
        merged.update({r.name: r for r in results})
        ordered = [merged[n] for n in BENCHMARKS if n in merged]
        report.update_readme(ordered, "python -m bench " + " ".join(sys.argv[1:]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
