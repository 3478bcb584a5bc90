"""What one sandboxed kernel start costs: wall time and CPU, alone and N at once.

``.venv/bin/python -m bench.kernel_start [N ...] [--concurrency C]`` starts N kernels of N
sessions at once (``pool.execute(key, "pass")``: a start and one empty cell), for each N
given (default 1 8 32), on one pool at the best level this machine offers. Per N it prints
the wall time of the whole batch, each kernel's own start (spawn → ``kernel_info``, the
pool's ``started_at``; a kernel waiting for a start slot is not counted there), and CPU: the
service's process (its threads: the pool's loop, zmq) and the kernels' processes (their
sandbox, interpreter and IPython import: every process in the kernel's cgroup, from
``/proc/<pid>/stat``, before it is stopped; needs cgroups, i.e. root). CPU seconds are the
load-proof figure; wall times follow the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from agents.sandbox import KernelPool, SandboxConfig


def _tree_cpu(pids: set[int]) -> float:
    """CPU seconds of live processes and the children they reaped (/proc/<pid>/stat)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15])  # utime stime cutime cstime
    return total / ticks


def _kernel_cpu(pool: KernelPool, key: str) -> float:
    kernel = pool.kernels[(key, "default")]
    pids = kernel.cgroup.pids() if kernel.cgroup is not None else set()
    if kernel.proc is not None:
        pids.add(kernel.proc.pid)
    return _tree_cpu(pids)


async def _batch(pool: KernelPool, n: int, tag: str) -> dict[str, float]:
    keys = [f"{tag}-{i}" for i in range(n)]
    cpu0, t0 = time.process_time(), time.perf_counter()
    cells = await asyncio.gather(*(pool.execute(k, "pass") for k in keys))
    wall = time.perf_counter() - t0
    own = [pool.kernels[(k, "default")].started_at for k in keys]
    cpu_service = time.process_time() - cpu0
    assert all(c.status == "ok" for c in cells), cells
    cpu_kernels = sum(_kernel_cpu(pool, k) for k in keys)
    await asyncio.gather(*(pool.shutdown_session(k, remove_files=True) for k in keys))
    return {
        "n": n,
        "wall_s": round(wall, 3),
        "start_p50_s": round(statistics.median(own), 3),
        "start_max_s": round(max(own), 3),
        "cpu_kernels_s_per_kernel": round(cpu_kernels / n, 3),
        "cpu_service_s_per_kernel": round(cpu_service / n, 3),
    }


def _base_dir() -> Path:
    base = Path(tempfile.mkdtemp(prefix="agentstation-bench-ks-"))
    base.chmod(0o711)  # every sandbox uid traverses it
    return base


async def main(counts: list[int], concurrency: int | None) -> None:
    base = _base_dir()
    config = SandboxConfig(base_dir=base, min_level="L0", max_kernels=max(counts))
    if concurrency is not None:
        config = dataclasses.replace(config, start_concurrency=concurrency)
    pool = KernelPool(config)
    try:
        level = await pool.start()
        print(f"level {level}, start_concurrency {pool.config.start_concurrency}")
        await _batch(pool, 1, "warm")  # page cache, imports
        for n in counts:
            print(await _batch(pool, n, f"n{n}"))
    finally:
        await pool.aclose()
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("counts", nargs="*", type=int, default=[1, 8, 32])
    parser.add_argument("--concurrency", type=int, default=None)
    args = parser.parse_args()
    asyncio.run(main(args.counts, args.concurrency))
