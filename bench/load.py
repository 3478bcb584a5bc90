"""Load generators (wrk, or aiohttp in this process) and side-by-side alternating runs.

Both generators keep ``connections`` keep-alive connections busy for ``duration_s`` with the
same request and report requests/s and latency percentiles. Non-2xx answers count as errors,
so a fast 404 never passes for throughput.
"""

from __future__ import annotations

import asyncio
import json
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp

from bench.common import ServerProcess, pct

_LUA = """
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = [==[%(body)s]==]
local paths = {%(paths)s}
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, paths[(n %% #paths) + 1])
end
done = function(s, lat, req)
  local e = s.errors
  io.write(string.format(
    'BENCHJSON {"requests":%%d,"duration_us":%%d,"errors":%%d,"p50_us":%%d,"p90_us":%%d,' ..
    '"p99_us":%%d,"max_us":%%d}\\n', s.requests, s.duration,
    e.connect + e.read + e.write + e.status + e.timeout,
    lat:percentile(50), lat:percentile(90), lat:percentile(99), lat.max))
end
"""


@dataclass
class LoadSpec:
    """One target: base URL, POST body, and the paths to cycle through."""

    name: str
    base_url: str
    body: dict[str, Any]
    paths: list[str]
    server: ServerProcess | None = None  # to wait for it to go idle after each run


@dataclass
class LoadResult:
    """One load run's figures (latencies in ms)."""

    target: str
    generator: str
    connections: int
    duration_s: float
    requests: int
    errors: int
    rps: float
    p50_ms: float
    p90_ms: float
    p99_ms: float
    max_ms: float
    gen_cpu_s: float = 0.0  # CPU the generator itself used
    server_cpu_s: float = 0.0  # CPU the server process used during the run

    @property
    def server_us_per_req(self) -> float:
        """Server CPU per completed request (µs): robust to a busy machine, unlike req/s."""
        return self.server_cpu_s / self.requests * 1e6 if self.requests else float("nan")

    def as_row(self) -> dict[str, Any]:
        """Rounded dict for tables and JSON."""
        return {k: round(v, 3) if isinstance(v, float) else v for k, v in asdict(self).items()}


def wrk_available() -> bool:
    """Whether the wrk binary is installed."""
    return shutil.which("wrk") is not None


def pick_generator(name: str) -> str:
    """Resolve "auto" to wrk when installed, else aiohttp."""
    if name == "auto":
        return "wrk" if wrk_available() else "aiohttp"
    return name


def run_wrk(spec: LoadSpec, connections: int, duration_s: float) -> LoadResult:
    """One wrk run (one thread: the other core is for the server)."""
    paths = ",".join(json.dumps(p) for p in spec.paths)
    script = _LUA % {"body": json.dumps(spec.body), "paths": paths}
    with tempfile.NamedTemporaryFile("w", suffix=".lua", delete=False) as f:
        f.write(script)
    secs = max(1, round(duration_s))
    cmd = ["wrk", "-t1", f"-c{connections}", f"-d{secs}s", "--timeout", "10s", "-s", f.name]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run([*cmd, spec.base_url], capture_output=True, text=True, timeout=secs + 30)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    Path(f.name).unlink(missing_ok=True)
    line = next((x for x in done.stdout.splitlines() if x.startswith("BENCHJSON ")), None)
    if line is None:
        raise RuntimeError(f"wrk failed: {done.stdout[-500:]} {done.stderr[-500:]}")
    data = json.loads(line.removeprefix("BENCHJSON "))
    dur = data["duration_us"] / 1e6
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return LoadResult(
        spec.name, "wrk", connections, dur, data["requests"], data["errors"],
        data["requests"] / dur, data["p50_us"] / 1e3, data["p90_us"] / 1e3,
        data["p99_us"] / 1e3, data["max_us"] / 1e3, cpu,
    )  # fmt: skip


async def _aiohttp_load(spec: LoadSpec, connections: int, duration_s: float) -> LoadResult:
    body = json.dumps(spec.body).encode()
    headers = {"Content-Type": "application/json"}
    latencies: list[float] = []
    errors = 0
    counter = 0
    connector = aiohttp.TCPConnector(limit=connections, force_close=False)
    async with aiohttp.ClientSession(spec.base_url, connector=connector) as http:
        start = time.perf_counter()
        stop_at = start + duration_s

        async def worker() -> None:
            nonlocal errors, counter
            while time.perf_counter() < stop_at:
                counter += 1
                path = spec.paths[counter % len(spec.paths)]
                t0 = time.perf_counter()
                try:
                    async with http.post(path, data=body, headers=headers) as resp:
                        await resp.read()
                        ok = resp.status < 300
                except aiohttp.ClientError:
                    ok = False
                latencies.append(time.perf_counter() - t0)
                errors += not ok

        cpu0 = time.process_time()
        await asyncio.gather(*(worker() for _ in range(connections)))
        cpu = time.process_time() - cpu0
        dur = time.perf_counter() - start
    ms = [x * 1e3 for x in latencies]
    return LoadResult(
        spec.name, "aiohttp", connections, dur, len(ms), errors, len(ms) / dur,
        pct(ms, 50), pct(ms, 90), pct(ms, 99), max(ms, default=0.0), cpu,
    )  # fmt: skip


def run_aiohttp(spec: LoadSpec, connections: int, duration_s: float) -> LoadResult:
    """One run of the in-process aiohttp generator."""
    return asyncio.run(_aiohttp_load(spec, connections, duration_s))


def run_load(generator: str, spec: LoadSpec, connections: int, duration_s: float) -> LoadResult:
    """One run with the named generator ("wrk" or "aiohttp")."""
    runner: Callable[[LoadSpec, int, float], LoadResult]
    runner = run_wrk if pick_generator(generator) == "wrk" else run_aiohttp
    before = spec.server.cpu_seconds() if spec.server else 0.0
    result = runner(spec, connections, duration_s)
    if spec.server:
        result.server_cpu_s = spec.server.cpu_seconds() - before
    return result


def wait_idle(server: ServerProcess | None, timeout_s: float = 15.0) -> None:
    """Wait until the server stops burning CPU (runs outlive requests: queued turns finish)."""
    if server is None:
        return
    deadline = time.monotonic() + timeout_s
    quiet = 0
    while time.monotonic() < deadline and quiet < 2:  # two quiet windows in a row
        before = server.cpu_seconds()
        time.sleep(0.25)
        quiet = quiet + 1 if server.cpu_seconds() - before < 0.025 else 0  # < 10% of a core


def alternate(
    specs: list[LoadSpec],
    generator: str,
    connections: int,
    duration_s: float,
    rounds: int,
    warmup_s: float = 1.0,
) -> dict[str, list[LoadResult]]:
    """Warm each target up, then run them in turn, ``rounds`` times: A B C C B A A B C …
    (odd rounds reversed: a target's place in the round moves its figure on this machine)."""
    for spec in specs if warmup_s > 0 else []:
        run_load(generator, spec, connections, warmup_s)
        wait_idle(spec.server)
    runs: dict[str, list[LoadResult]] = {s.name: [] for s in specs}
    for r in range(rounds):
        for spec in specs if r % 2 == 0 else specs[::-1]:
            done = runs[spec.name]
            if done and stalled(done[-1]):  # stalled once: more rounds only cost time
                continue
            done.append(run_load(generator, spec, connections, duration_s))
            wait_idle(spec.server)
    return runs


def summarize(results: list[LoadResult]) -> LoadResult:
    """Median over rounds of each figure (sums of requests and errors)."""
    first = results[0]
    done = [r for r in results if r.requests] or results  # a stalled run has no latencies
    nan = float("nan") if not any(r.requests for r in results) else None

    def med(values: list[float]) -> float:
        return nan if nan is not None else statistics.median(values)

    return LoadResult(
        first.target, first.generator, first.connections,
        sum(r.duration_s for r in results), sum(r.requests for r in results),
        sum(r.errors for r in results), statistics.median(r.rps for r in results),
        med([r.p50_ms for r in done]), med([r.p90_ms for r in done]),
        med([r.p99_ms for r in done]), max(r.max_ms for r in done),
        sum(r.gen_cpu_s for r in results), sum(r.server_cpu_s for r in results),
    )  # fmt: skip


def stalled(result: LoadResult) -> bool:
    """True when not one request completed (latency figures are NaN then)."""
    return result.requests == 0
