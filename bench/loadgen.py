"""Which load generator to trust on a 2-core machine: wrk vs aiohttp in this process.

Both drive the bare FastAPI echo with the same request and connections, alternating. The
better generator reaches more requests/s and spends less CPU per request (every CPU
microsecond the generator burns is taken from the server under test on 2 cores).
"""

from __future__ import annotations

from bench.common import BenchOptions, BenchResult, Skip, uvicorn_server
from bench.load import LoadResult, LoadSpec, run_aiohttp, run_wrk, summarize, wrk_available

NAME = "loadgen"
BODY = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}


def run(opts: BenchOptions) -> BenchResult:
    """Alternate wrk and aiohttp against the echo at 1 and ``opts.connections`` connections."""
    if not wrk_available():
        raise Skip("wrk is not installed (apt-get install -y wrk)")
    result = BenchResult(NAME)
    with uvicorn_server("echo", "bench.baselines.echo:app") as echo:
        spec = LoadSpec("echo", echo.base_url, BODY, ["/v1/chat/completions"])
        for conns in (1, opts.connections):
            runs: dict[str, list[LoadResult]] = {"wrk": [], "aiohttp": []}
            run_wrk(spec, conns, 1)  # warm-up
            for _ in range(opts.rounds):
                runs["wrk"].append(run_wrk(spec, conns, opts.dur(2.0)))
                runs["aiohttp"].append(run_aiohttp(spec, conns, opts.dur(2.0)))
            for rs in runs.values():
                s = summarize(rs)
                row = s.as_row()
                row["gen_cpu_us_per_req"] = round(s.gen_cpu_s / max(s.requests, 1) * 1e6, 1)
                result.rows.append(row)
    by = {(r["generator"], r["connections"]): r for r in result.rows}
    wrk_c, aio_c = by[("wrk", opts.connections)], by[("aiohttp", opts.connections)]
    result.notes.append(
        f"At {opts.connections} connections wrk measured {wrk_c['rps']:.0f} req/s using "
        f"{wrk_c['gen_cpu_us_per_req']} µs CPU/request; aiohttp {aio_c['rps']:.0f} req/s using "
        f"{aio_c['gen_cpu_us_per_req']} µs CPU/request. The harness uses "
        f"{'wrk' if wrk_c['rps'] >= aio_c['rps'] else 'aiohttp'} (--generator overrides)."
    )
    return result
