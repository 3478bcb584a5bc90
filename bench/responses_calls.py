"""Python function calls per request of ``/v1/responses`` and ``/v1/chat/completions``, in
process: a measure of the work a front door does that does not move with the machine's load.

``python -m bench.responses_calls [--requests N]`` (run from a tree's root: it measures that
tree's code). The app runs in this process on a fresh SQLite database with the scripted model
in echo mode (as bench/responses.py's gateway), driven through httpx's ASGI transport;
cProfile counts every call made while ``N`` requests of each target run (the client's calls
included: the same for every target). Prints one line per target; ``--by-function N``
(with ``--targets``) then lists the N functions whose calls per request differ most between
each ``responses*`` target and its chat twin.

Calls do not see C-level work (JSON encoding, validation): ``--instructions`` counts the
machine instructions the gateway itself (``agentstation serve``, as bench/responses.py runs
it) executes per request under valgrind's callgrind, instrumented only while each target's
``N`` sequential requests run (``--rounds`` alternating rounds, the median kept). The gateway
runs timers of its own while it waits; an idle window of as long as the slowest round measures
their rate, subtracted from each round by its wall time. Load-proof up to that correction
(≈ ±3 %); slow: ≈ 2 min to start, ≈ 0.2 s per request. ``--keep DIR`` keeps each target's
last dump (``DIR/<target>.callgrind``) for ``callgrind_annotate``: the C functions (JSON
encoding, allocation, dict work) behind a difference.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import http.client
import json
import pstats
import shutil
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from asgi_lifespan import LifespanManager

from app.db.migrate import upgrade
from app.main import create_app
from app.settings import Settings
from bench.callgrind import control, dumped
from bench.inproc import quiet_logs

KEY = "bench-key"
CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hello world"}]}
RESPONSES = {"model": "scripted", "input": "hello world", "store": False}
TARGETS: dict[str, tuple[str, dict[str, Any]]] = {
    "chat": ("/v1/chat/completions", CHAT),
    "chat-stream": ("/v1/chat/completions", {**CHAT, "stream": True}),
    "responses": ("/v1/responses", RESPONSES),
    "responses-stream": ("/v1/responses", {**RESPONSES, "stream": True}),
    "responses-stored": ("/v1/responses", {"model": "scripted", "input": "hello world"}),
}
PAIRS = {"responses": "chat", "responses-stream": "chat-stream"}  # each and its chat twin


async def measure(
    requests: int, warm: int = 50, names: list[str] | None = None
) -> dict[str, pstats.Stats]:
    """Each target's profile (``requests`` requests; ``names``: those targets, default all)."""
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'calls.db'}"
        await asyncio.to_thread(upgrade, url)
        settings = Settings(
            database_url=url,
            models=json.dumps([{"name": "scripted", "backend": "scripted"}]),
            api_keys=f"a:{KEY}",
            sandbox_enabled=False,
            access_log=False,
        )
        app = create_app(settings)
        out: dict[str, pstats.Stats] = {}
        async with LifespanManager(app), quiet_logs("httpx"):
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {KEY}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=headers
            ) as client:
                for name in names or list(TARGETS):
                    path, body = TARGETS[name]
                    for _ in range(warm):
                        (await client.post(path, json=body)).raise_for_status()
                    profile = cProfile.Profile()
                    profile.enable()
                    for _ in range(requests):
                        await client.post(path, json=body)
                    profile.disable()
                    out[name] = pstats.Stats(profile)
        return out


def by_function(stats: dict[str, pstats.Stats], requests: int, top: int) -> None:
    """Per target pair (``responses*`` and its chat twin), the ``top`` functions whose calls
    per request differ most: where the Responses front door's extra calls are."""

    def calls(s: pstats.Stats) -> dict[str, float]:
        table = s.stats  # type: ignore[attr-defined]
        name = pstats.func_std_string  # type: ignore[attr-defined]
        return {name(f): v[1] / requests for f, v in table.items()}

    for name, twin in PAIRS.items():
        if name not in stats or twin not in stats:
            continue
        mine, theirs = calls(stats[name]), calls(stats[twin])
        diff = {f: mine.get(f, 0.0) - theirs.get(f, 0.0) for f in mine.keys() | theirs.keys()}
        print(f"-- {name} vs {twin}: calls per request, the largest differences")
        for f, d in sorted(diff.items(), key=lambda kv: -abs(kv[1]))[:top]:
            print(f"{d:+8.1f}  {mine.get(f, 0.0):7.1f} {theirs.get(f, 0.0):7.1f}  {f}")


def instructions(
    requests: int, rounds: int, names: list[str], keep: Path | None = None
) -> dict[str, float]:
    """Instructions per request of each target in the gateway process (callgrind); ``keep``:
    a folder for each target's last dump (``callgrind_annotate`` reads them)."""
    from bench.common import gateway_server
    from bench.responses import GATEWAY_ENV, SCRIPTED

    if shutil.which("valgrind") is None:
        raise SystemExit("--instructions needs valgrind (apt-get install valgrind)")
    out = Path(tempfile.mkdtemp(prefix="bench-callgrind-"))
    server = gateway_server("gw-callgrind", SCRIPTED, None, **GATEWAY_ENV)
    server.cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
                  f"--callgrind-out-file={out}/cg.%p", *server.cmd]  # fmt: skip
    server.ready_timeout_s = 900.0
    walls: dict[str, list[float]] = {name: [] for name in names}
    counts: dict[str, list[int]] = {name: [] for name in names}
    with server:
        assert server.proc is not None
        pid = server.proc.pid
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=300)

        def send(name: str, n: int) -> None:
            path, body = TARGETS[name]
            raw = json.dumps(body).encode()
            for _ in range(n):
                conn.request("POST", path, raw, {"Content-Type": "application/json"})
                answer = conn.getresponse()
                answer.read()
                assert answer.status == 200, (name, answer.status)

        for name in names:
            send(name, 20)  # warm
        control(pid, "-i", "on")
        for _ in range(rounds):
            for name in names:
                control(pid, "-z")
                start = time.monotonic()
                send(name, requests)
                walls[name].append(time.monotonic() - start)
                control(pid, "-d")
                counts[name].append(dumped(out, pid))
                if keep is not None:
                    newest = max(out.glob(f"cg.{pid}.*"), key=lambda p: int(p.suffix[1:]))
                    shutil.copy(newest, keep / f"{name}.callgrind")
        idle_s = max(w for ws in walls.values() for w in ws)
        control(pid, "-z")
        time.sleep(idle_s)
        control(pid, "-d")
        idle_rate = dumped(out, pid) / idle_s
    shutil.rmtree(out, ignore_errors=True)
    return {
        name: statistics.median(
            (c - idle_rate * w) / requests for c, w in zip(counts[name], walls[name], strict=True)
        )
        for name in names
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--requests", type=int, default=300)
    parser.add_argument("--instructions", action="store_true", help="callgrind (module doc)")
    parser.add_argument("--rounds", type=int, default=2, help="with --instructions")
    parser.add_argument("--targets", default="chat,responses,chat-stream,responses-stream")
    parser.add_argument("--keep", type=Path, help="with --instructions: keep the dumps here")
    parser.add_argument(
        "--by-function", type=int, default=0, metavar="N",
        help="without --instructions: the N functions whose calls differ most from chat's",
    )  # fmt: skip
    args = parser.parse_args()
    names = args.targets.split(",")
    if args.instructions:
        if args.keep is not None:
            args.keep.mkdir(parents=True, exist_ok=True)
        counted = instructions(args.requests, args.rounds, names, args.keep)
        for name, n in counted.items():
            twin = PAIRS.get(name)
            ratio = f" ({n / counted[twin]:.3f}x {twin})" if twin in counted else ""
            print(f"{name}: {n:,.0f} instructions per request{ratio}")
        return
    stats = asyncio.run(measure(args.requests, names=names if args.by_function else None))
    for name, profile in stats.items():
        calls = profile.total_calls / args.requests  # type: ignore[attr-defined]
        print(f"{name}: {calls:,.0f} Python calls per request")
    if args.by_function:
        by_function(stats, args.requests, args.by_function)


if __name__ == "__main__":
    main()
