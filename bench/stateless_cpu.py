"""CPU per request of the stateless paths, in process, against their anchors in the same process.

``python -m bench.stateless_cpu [--n 10000] [--rounds 50] [echo chat agent fwd proxy]`` builds
the gateway as ``agentstation serve`` does (``app.cli.build_app``: SQLite, the scripted model in
echo mode, the sandbox off) and the anchors (bench/baselines/echo.py, which validates the same
request with the same model; bench/baselines/forwarder.py in front of the mock upstream, started
here in a subprocess), wraps each in uvicorn's ``ProxyHeadersMiddleware`` as ``serve`` has it,
and calls them through ASGI with the request wrk sends: no sockets, so uvicorn's own per-request
work, the same for every target, is left out. Targets alternate every ``n / rounds`` requests,
so a busy machine slows them alike; it prints CPU µs per request and the ratio to ``echo``
(``proxy``: to ``fwd``). On a shared, loaded machine these ratios held within ±5 % where the
served CPU per request did not (bench/README.md, "Stateless paths, round three").

To compare two trees, run it once per tree, alternating: ``--tree DIR`` serves that checkout's
``app`` and ``agents`` (the anchors and the harness stay this tree's), e.g.
``python -m bench.stateless_cpu --tree /work/base-perf-gateway`` then without ``--tree``.

Load-proof modes (one window of ``--n`` requests per target after the warm-up): ``--calls``,
function calls per request (cProfile), each target's most called functions and its calls by
origin (package, stdlib module or this tree's file); ``--instructions``, machine instructions
per request (the module runs itself again under callgrind, instrumented only in the windows;
``--n 200``–``400``: about a minute per tree).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
import time
from functools import partial
from typing import Any

from bench.common import HOST, free_port, http_get_status
from bench.inproc import asgi_post

TARGETS = ("echo", "chat", "agent", "fwd", "proxy")
AGENT = "bench-agent"
PATH = "/v1/chat/completions"
MODELS = {"echo": "scripted", "chat": "scripted", "agent": AGENT, "fwd": "mock", "proxy": "mock"}


def body(target: str) -> bytes:
    """The request wrk sends to ``target`` (bench/gateway.py's and bench/proxy.py's body)."""
    messages = [{"role": "user", "content": "hello world"}]
    return json.dumps({"model": MODELS[target], "messages": messages}).encode()


# One POST through the ASGI app with the request wrk sends (``bench.inproc.asgi_post``); its
# body, a non-2xx answer raising (a partial: no call of its own in ``--calls``' counts).
call = partial(asgi_post, headers=[(b"user-agent", b"wrk"), (b"content-type", b"application/json")])


@contextlib.contextmanager
def mock_upstream() -> Any:
    """bench/baselines/mock_openai.py on a free port, in a subprocess; its base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "uvicorn", "bench.baselines.mock_openai:app", "--host", HOST]
    cmd += ["--port", str(port), "--loop", "uvloop", "--log-level", "warning"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://{HOST}:{port}"
        deadline = time.monotonic() + 30
        while http_get_status(f"{url}/healthz") != 200:
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the mock upstream did not start")
            time.sleep(0.1)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def configure(upstream: str | None) -> None:
    """The gateway's settings: a fresh SQLite file, the scripted model (and the mock's)."""
    models: list[dict[str, Any]] = [{"name": "scripted", "backend": "scripted"}]
    if upstream is not None:
        os.environ["BENCH_UPSTREAM"] = upstream  # the forwarder's
        os.environ["BENCH_MOCK_KEY"] = "sk-bench"
        models.append(
            {"name": "mock", "backend": "openai", "base_url": f"{upstream}/v1",
             "model": "mock", "api_key_env": "BENCH_MOCK_KEY"}
        )  # fmt: skip
    db = tempfile.mkdtemp(prefix="bench-cpu-")
    os.environ |= {
        "AGENTSTATION_DATABASE_URL": f"sqlite+aiosqlite:///{db}/bench.db",
        "AGENTSTATION_MODELS": json.dumps(models),
        "AGENTSTATION_LOG_LEVEL": "warning",
        "AGENTSTATION_SANDBOX_ENABLED": "false",
    }


def served_as_uvicorn(app: Any) -> Any:
    """``app`` behind uvicorn's proxy-headers middleware, as ``serve`` (and uvicorn) run it."""
    from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware

    return ProxyHeadersMiddleware(app, HOST)


async def measure(
    targets: list[str], n: int, rounds: int, calls: bool = False, callgrind: str | None = None
) -> dict[str, float]:
    """CPU seconds per request of each target, alternating in ``rounds``; with ``calls``,
    function calls per request instead (cProfile's count, Python and C: load-proof), the
    most-called functions of each target printed; with ``callgrind`` (the dump folder of the
    valgrind this process runs under), machine instructions per request (load-proof)."""
    from app.cli import build_app
    from app.settings import Settings
    from bench.baselines import echo

    gateway = await asyncio.to_thread(build_app, Settings())  # migrates SQLite (its own loop)
    apps: dict[str, Any] = {"echo": served_as_uvicorn(echo.app)}
    async with contextlib.AsyncExitStack() as stack:
        if "fwd" in targets:
            from bench.baselines import forwarder

            await stack.enter_async_context(forwarder.app.router.lifespan_context(forwarder.app))
            apps["fwd"] = served_as_uvicorn(forwarder.app)
        await stack.enter_async_context(gateway.router.lifespan_context(gateway))
        served = served_as_uvicorn(gateway)
        spec = {"name": AGENT, "spec": {"kind": "agent", "model": "scripted"}}
        await call(served, "/v1/agents", json.dumps(spec).encode())
        for target in ("chat", "agent", "proxy"):
            apps[target] = served
        bodies = {t: body(t) for t in targets}
        for target in targets:  # warm-up: caches, the upstream's connections
            for _ in range(300):
                await call(apps[target], PATH, bodies[target])
        gc.collect()
        gc.freeze()
        if calls:
            return {t: await count_calls(apps[t], bodies[t], n) for t in targets}
        if callgrind is not None:
            return {t: await count_instructions(apps[t], bodies[t], n, callgrind) for t in targets}
        spent = dict.fromkeys(targets, 0.0)
        for _ in range(rounds):
            for target in targets:
                app, data = apps[target], bodies[target]
                start = time.process_time()
                for _ in range(n // rounds):
                    await call(app, PATH, data)
                spent[target] += time.process_time() - start
    return {t: spent[t] / (n // rounds * rounds) for t in targets}


async def count_calls(app: Any, data: bytes, n: int) -> float:
    """Function calls per request of ``n`` requests (cProfile); prints the most called."""
    import cProfile
    import pstats

    # Warm again: the upstream (uvicorn) closes connections idle for 5 s while other targets
    # are counted; aiohttp finds out on the first request that reuses one.
    with contextlib.suppress(Exception):
        await call(app, PATH, data)
    for _ in range(50):
        await call(app, PATH, data)
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(n):
        await call(app, PATH, data)
    profile.disable()
    stats = pstats.Stats(profile)
    rows = stats.stats  # type: ignore[attr-defined]
    top = sorted(rows.items(), key=lambda kv: -kv[1][1])[:25]
    for (file, line, name), (_, ncalls, *_rest) in top:
        print(f"  {ncalls / n:6.1f}  {name}  {file.rsplit('site-packages/', 1)[-1]}:{line}")
    by_origin = calls_by_origin(rows)
    print("  calls per request by origin (a C function's calls go to its caller's):")
    for origin, count in sorted(by_origin.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {count / n:6.1f}  {origin}")
    return float(stats.total_calls) / n  # type: ignore[attr-defined]


async def count_instructions(app: Any, data: bytes, n: int, folder: str) -> float:
    """Instructions per request of ``n`` requests: callgrind's instrumentation on, counters
    zeroed, the requests, a dump (this process runs under ``valgrind --instr-atstart=no``)."""
    from pathlib import Path

    from bench.callgrind import dumped

    with contextlib.suppress(Exception):  # see count_calls: a connection closed while idle
        await call(app, PATH, data)
    for _ in range(20):
        await call(app, PATH, data)
    await callgrind_control("-i", "on")
    await callgrind_control("-z")
    for _ in range(n):
        await call(app, PATH, data)
    await callgrind_control("-d")
    await callgrind_control("-i", "off")
    return dumped(Path(folder), os.getpid()) / n


async def callgrind_control(*args: str) -> None:
    """``callgrind_control ARGS`` on this process: valgrind takes the command while this
    process runs (not while it blocks waiting for the tool), so the loop polls for its end."""
    proc = subprocess.Popen(  # noqa: ASYNC220 (polled below: the loop must keep running)
        ["callgrind_control", *args, str(os.getpid())],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 120
    while proc.poll() is None:
        if time.monotonic() > deadline:
            proc.kill()
            raise RuntimeError(f"callgrind_control {' '.join(args)} did not finish")
        await asyncio.sleep(0.002)
    if proc.returncode:
        raise RuntimeError(f"callgrind_control {' '.join(args)}: exit {proc.returncode}")


def under_callgrind(argv: list[str]) -> int:
    """Run this module again, with ``argv``, under callgrind (instrumentation off until
    ``count_instructions`` turns it on); its exit status."""
    import shutil

    folder = tempfile.mkdtemp(prefix="bench-scg-")
    cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
           f"--callgrind-out-file={folder}/cg.%p", sys.executable, "-m", "bench.stateless_cpu",
           *argv, "--callgrind-dir", folder]  # fmt: skip
    env = {"PYTHONHASHSEED": "0", **os.environ}  # the same string hashes in every run
    try:
        return subprocess.run(cmd, check=False, env=env).returncode
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def origin(file: str) -> str:
    """Where a profiled function lives: a package (``prometheus_client``), a stdlib module
    (``asyncio``), or this tree's file (``app/ops/metrics.py``)."""
    if "site-packages/" in file:
        return file.rsplit("site-packages/", 1)[1].split("/", 1)[0]
    if "/lib/python3" in file:
        return file.rsplit("/lib/python3", 1)[1].split("/")[1].removesuffix(".py")
    for top in ("/tests/", "/app/", "/agents/", "/bench/"):
        if top in file:
            return top[1:] + file.rsplit(top, 1)[1]
    return file


def calls_by_origin(rows: dict[Any, Any]) -> dict[str, int]:
    """cProfile's call counts summed by ``origin``; a built-in's calls by its callers'."""
    out: dict[str, int] = {}
    for (file, _line, _name), (_cc, ncalls, _tt, _ct, callers) in rows.items():
        if file != "~":
            out[origin(file)] = out.get(origin(file), 0) + ncalls
            continue
        for (caller, _l, _n), counts in callers.items():
            key = origin(caller)
            out[key] = out.get(key, 0) + (counts[0] if isinstance(counts, tuple) else counts)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.stateless_cpu")
    parser.add_argument("targets", nargs="*", help=f"any of {', '.join(TARGETS)} (all)")
    parser.add_argument("--n", type=int, default=10000, help="requests per target")
    parser.add_argument("--rounds", type=int, default=50)
    parser.add_argument("--calls", action="store_true", help="function calls per request")
    parser.add_argument("--tree", help="another checkout whose app and agents are measured")
    parser.add_argument(
        "--instructions", action="store_true", help="machine instructions per request "
        "(callgrind: slow, use --n 200)",
    )  # fmt: skip
    parser.add_argument("--callgrind-dir", help=argparse.SUPPRESS)  # set by --instructions
    args = parser.parse_args()
    if args.instructions:
        argv = [a for a in sys.argv[1:] if a != "--instructions"]
        raise SystemExit(under_callgrind(argv))
    targets = list(args.targets) or list(TARGETS)
    if unknown := set(targets) - set(TARGETS):
        parser.error(f"unknown targets: {', '.join(sorted(unknown))}")
    if "echo" not in targets and {"chat", "agent"} & set(targets):  # their anchor
        targets.insert(0, "echo")
    if "proxy" in targets and "fwd" not in targets:
        targets.insert(targets.index("proxy"), "fwd")
    if args.tree:  # before anything imports ``app`` or ``agents``
        sys.path.insert(0, os.path.abspath(args.tree))
    with contextlib.ExitStack() as stack:
        upstream = None
        if "fwd" in targets:
            upstream = stack.enter_context(mock_upstream())
        configure(upstream)
        cpu = asyncio.run(measure(targets, args.n, args.rounds, args.calls, args.callgrind_dir))
    import app

    print(f"gateway tree: {os.path.dirname(os.path.dirname(app.__file__))}")
    print(f"load average: {', '.join(f'{x:.1f}' for x in os.getloadavg())}")
    for target in targets:
        anchor = "fwd" if target == "proxy" else "echo"
        ratio = f"{cpu[target] / cpu[anchor]:.3f}× {anchor}" if anchor in cpu else ""
        if args.calls:
            print(f"{target:6s} {cpu[target]:7.1f} function calls per request  {ratio}")
        elif args.callgrind_dir:
            print(f"{target:6s} {cpu[target]:11,.0f} instructions per request  {ratio}")
        else:
            print(f"{target:6s} {cpu[target] * 1e6:7.1f} µs CPU per request  {ratio}")


if __name__ == "__main__":
    main()
