"""Sandboxed kernels: cell round trip, kernel cold start, concurrent starts.

``python -m bench sandbox`` (or ``python -m bench.sandbox``) prints a table and writes
bench/results/sandbox.json. Runs at the best level the machine offers (L3 as root with
bubblewrap); the level is in the results. With ``--baseline DIR`` each round runs this
measurement twice in fresh processes, one with this tree's ``agents`` and one with that
tree's (``bench.common.run_in_tree``), alternating; rows are medians over the rounds.
"""

from __future__ import annotations

import asyncio
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agents.actions.base import current_session_id
from agents.actions.ipython import AsyncIPythonInteractive
from agents.sandbox import KernelPool, SandboxConfig
from bench import report
from bench.common import BenchOptions, BenchResult, Goal, compare_row, run_in_tree

NAME = "sandbox"
GOAL_MEDIAN_MS = 10.0


def _ms(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return {
        "median_ms": round(statistics.median(ordered) * 1000, 2),
        "p99_ms": round(p99 * 1000, 2),
        "min_ms": round(ordered[0] * 1000, 2),
    }


async def _round_trips(pool: KernelPool, n: int) -> list[float]:
    await pool.execute("bench", "1")
    times = []
    for _ in range(n):
        start = time.perf_counter()
        await pool.execute("bench", "1")
        times.append(time.perf_counter() - start)
    return times


async def _baseline_round_trips(n: int) -> list[float]:
    """Plain jupyter_client (TCP, no sandbox, no pool) under the same machine load."""
    from jupyter_client.manager import start_new_async_kernel

    manager, client = await start_new_async_kernel(kernel_name="python3")
    try:
        times = []
        for _ in range(n + 1):
            start = time.perf_counter()
            await client.execute_interactive("1", timeout=10, output_hook=lambda _msg: None)
            times.append(time.perf_counter() - start)
        return times[1:]
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)


async def _tool_round_trips(pool: KernelPool, n: int) -> list[float]:
    tool = AsyncIPythonInteractive(pool=pool)
    token = current_session_id.set("bench-tool")
    try:
        await tool.run("x = 1")
        times = []
        for _ in range(n):
            start = time.perf_counter()
            await tool.run("print(x)")
            times.append(time.perf_counter() - start)
    finally:
        current_session_id.reset(token)
    return times


async def _cold_starts(pool: KernelPool, n: int) -> list[float]:
    times = []
    for i in range(n):
        start = time.perf_counter()
        await pool.execute(f"cold-{i}", "1")
        times.append(time.perf_counter() - start)
        await pool.shutdown_session(f"cold-{i}", remove_files=True)
    return times


async def _concurrent_starts(pool: KernelPool, n: int) -> float:
    start = time.perf_counter()
    await asyncio.gather(*(pool.execute(f"conc-{i}", "1") for i in range(n)))
    elapsed = time.perf_counter() - start
    await asyncio.gather(*(pool.shutdown_session(f"conc-{i}", True) for i in range(n)))
    return elapsed


def _base_dir() -> Path:
    """A base dir the sandbox uids can traverse."""
    base = Path(tempfile.mkdtemp(prefix="agentstation-bench-sbx-"))
    base.chmod(0o711)
    return base


async def measure(opts: BenchOptions) -> BenchResult:
    """Run every measurement on one fresh pool."""
    base = _base_dir()
    pool = KernelPool(SandboxConfig(base_dir=base, min_level="L0", max_kernels=16))
    result = BenchResult(NAME)
    try:
        started = time.perf_counter()
        level = await pool.start()
        selftest_s = time.perf_counter() - started
        n = 50 if opts.quick else 400
        rows: list[dict[str, Any]] = [
            {"what": "cell round trip (pool.execute)", "n": n, **_ms(await _round_trips(pool, n))},
            {"what": "cell round trip (tool → ActionReturn)", "n": n,
             **_ms(await _tool_round_trips(pool, n))},
        ]  # fmt: skip
        base_rt = await _baseline_round_trips(n)
        rows.append(
            {"what": "baseline: plain jupyter_client", "n": n, **_ms(base_rt), "level": "none"}
        )
        cold = await _cold_starts(pool, 2 if opts.quick else 5)
        rows.append({"what": "kernel cold start + first cell", "n": len(cold), **_ms(cold)})
        conc_n = 4 if opts.quick else 8
        conc = await _concurrent_starts(pool, conc_n)
        rows.append({"what": f"{conc_n} kernels started at once (total)", "n": 1,
                     "median_ms": round(conc * 1000, 1)})  # fmt: skip
        rows.append({"what": "pool start (self-test)", "n": 1,
                     "median_ms": round(selftest_s * 1000, 1)})  # fmt: skip
        for row in rows:
            row.setdefault("level", level)
        result.rows = rows
        median = float(rows[0]["median_ms"])
        result.goals.append(
            Goal("sandbox cell round trip (median)", f"≤ {GOAL_MEDIAN_MS:g} ms", f"{median} ms",
                 median <= GOAL_MEDIAN_MS, f"{GOAL_MEDIAN_MS - median:+.1f} ms")
        )  # fmt: skip
        result.notes.append(
            f"isolation level {level}; start concurrency {pool.config.start_concurrency}"
        )
    finally:
        await pool.aclose()
        shutil.rmtree(base, ignore_errors=True)
    return result


def run(opts: BenchOptions) -> BenchResult:
    """Entry point for ``python -m bench``."""
    if opts.baseline is not None:
        return side_by_side(opts, opts.baseline)
    return asyncio.run(measure(opts))


def side_by_side(opts: BenchOptions, baseline: Path) -> BenchResult:
    """This tree's kernels and the baseline's, each round in two fresh processes (new, old);
    per row the median over rounds of median, p99 and min."""
    runs: dict[str, list[BenchResult]] = {"new": [], "old": []}
    for _ in range(opts.rounds):
        runs["new"].append(run_in_tree(NAME, opts, None))
        runs["old"].append(run_in_tree(NAME, opts, baseline))
    result = BenchResult(NAME, goals=runs["new"][-1].goals, notes=runs["new"][-1].notes)
    merged: dict[str, list[dict[str, Any]]] = {}
    for tree, results in runs.items():
        merged[tree] = []
        for i, row in enumerate(results[0].rows):
            row = dict(row)
            for fig in ("median_ms", "p99_ms", "min_ms"):
                values = [r.rows[i][fig] for r in results if fig in r.rows[i]]
                if values:
                    row[fig] = round(statistics.median(values), 2)
            merged[tree].append({"tree": tree, **row})
        result.rows += merged[tree]
    for new, old in zip(merged["new"], merged["old"], strict=True):
        result.sidebyside.append(
            compare_row(new["what"], "median_ms", new["median_ms"], old["median_ms"])
        )
    median = float(merged["new"][0]["median_ms"])
    result.goals = [
        Goal("sandbox cell round trip (median)", f"≤ {GOAL_MEDIAN_MS:g} ms", f"{median} ms",
             median <= GOAL_MEDIAN_MS, f"{GOAL_MEDIAN_MS - median:+.1f} ms")
    ]  # fmt: skip
    result.notes.append(f"median over {opts.rounds} rounds of new, old in fresh processes")
    return result


def main() -> None:
    """``python -m bench.sandbox``: measure, print, write bench/results/sandbox.json."""
    result = run(BenchOptions())
    print(report.render(result))
    report.write_json(result)


if __name__ == "__main__":
    main()
