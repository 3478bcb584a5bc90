"""The per-request cost of the fleet's shared rate limit (PostgreSQL) against the in-process one.

Calls each limiter's ``admit`` directly (no HTTP), ``--requests`` times per round, sequentially
and then ``--concurrency`` at once, on a fresh bench PostgreSQL database: wall time and this
process's CPU per admission, median over the rounds. Keys are spread over ``--keys`` callers
with a limit no request reaches (the admitted path: the one every request pays).

Run: ``python -m bench.ratelimit_cost [--requests 2000] [--concurrency 16] [--rounds 3]``
(prints one JSON row per limiter and mode). Needs
PostgreSQL as bench/common.py (its database ``agentstation_bench_ratelimit``, recreated).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

from app.db.engine import create_engine
from app.ops.ratelimit import Limiter, RateLimit, TokenBucketLimiter
from app.ops.shared_limits import PgRateLimiter
from bench.common import reset_postgres_db


async def _round(limiter: Limiter, n: int, keys: int, concurrency: int) -> tuple[float, float]:
    """(wall µs, CPU µs) per admission."""
    sem = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with sem:
            assert await limiter.admit(f"key:{i % keys}") == 0.0

    wall, cpu = time.perf_counter(), time.process_time()
    await asyncio.gather(*(one(i) for i in range(n)))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return wall / n * 1e6, cpu / n * 1e6


async def main(args: argparse.Namespace) -> list[dict[str, Any]]:
    url = await asyncio.to_thread(reset_postgres_db, "agentstation_bench_ratelimit")
    engine = create_engine(url, pool_size=args.concurrency, max_overflow=0)
    rate = RateLimit.parse("1000000000/hour")
    limiters: dict[str, Limiter] = {
        "in_process": TokenBucketLimiter(rate),
        "postgres": PgRateLimiter(rate, engine),
    }
    rows = []
    try:
        for name, limiter in limiters.items():
            for mode, conc in (("sequential", 1), ("concurrent", args.concurrency)):
                await _round(limiter, min(200, args.requests), args.keys, conc)  # warm
                runs = [
                    await _round(limiter, args.requests, args.keys, conc)
                    for _ in range(args.rounds)
                ]
                rows.append(
                    {
                        "limiter": name,
                        "mode": mode,
                        "concurrency": conc,
                        "wall_us_per_request": round(statistics.median(r[0] for r in runs), 1),
                        "cpu_us_per_request": round(statistics.median(r[1] for r in runs), 1),
                    }
                )
    finally:
        await engine.dispose()
    return rows


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument("--keys", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=3)
    for row in asyncio.run(main(parser.parse_args())):
        print(json.dumps(row))
