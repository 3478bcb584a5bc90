"""A persisted turn on SQLite at a given history length, counted load-proof (issue 29).

The app runs in process on a fresh SQLite database (the scripted model, no sockets), called
through ASGI as ``bench.session_calls`` calls it. Sessions are pre-filled
(``PUT /v1/sessions/{id}/memory``) with ``--history`` messages each; turns go round robin over
``--sessions`` of them (each turn adds 2 messages), ``--concurrency`` at once (each client its
own sessions: with 32, the pool's connections are used as under ``bench.turn_cpu``'s load).
The collector is set as ``serve`` sets it (``freeze_gc_heap``). Per history length and mode
(``json``: the answer as JSON, as ``bench.persistence``'s history turns; ``stream``: SSE, as
``bench.turn_cpu``'s):

- ``calls``: Python and C calls per turn (cProfile), with ``--top K`` the K functions of most
  own time;
- ``instructions`` (``--instructions``: this module runs itself again under callgrind,
  instrumented only while the turns run): machine instructions per turn, and the share of
  them in ``libsqlite3`` (callgrind's per-object totals; the kernel's work is not counted);
- ``syscalls`` (``--syscalls``, Linux): the system calls per turn by name, from ``strace -c``
  of a second run with and without the turns.

``python -m bench.sqlite_turn [--history 10 1000] [--modes json stream] [--n 200]
[--instructions] [--baseline DIR]`` (one JSON row per tree, history and mode; a baseline tree
is run the same way in its own process, after this one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import os
import pstats
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

KEY = "bench-key"


async def call(app: Any, method: str, path: str, body: Any) -> tuple[int, bytes]:
    """One request through the ASGI app, as a kept-alive client sends it."""
    data = json.dumps(body).encode()
    headers = [
        (b"host", b"127.0.0.1:8000"),
        (b"content-type", b"application/json"),
        (b"authorization", b"Bearer " + KEY.encode()),
        (b"content-length", str(len(data)).encode()),
    ]
    scope = {
        "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": "1.1", "method": method, "scheme": "http", "path": path,
        "raw_path": path.encode(), "query_string": b"", "root_path": "", "headers": headers,
        "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 8000), "state": {},
    }  # fmt: skip
    sent = False

    async def receive() -> dict[str, Any]:
        nonlocal sent
        if sent:
            await asyncio.sleep(3600)
        sent = True
        return {"type": "http.request", "body": data, "more_body": False}

    out: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        out.append(message)

    await app(scope, receive, send)
    return out[0]["status"], b"".join(m.get("body", b"") for m in out[1:])


def history(n: int) -> dict[str, Any]:
    """``bench.persistence``'s pre-filled memory: n alternating user/agent messages."""
    senders = ("user", "a")
    return {"memory": [{"content": f"message {i}", "sender": senders[i % 2]} for i in range(n)]}


async def _control(*args: str) -> None:
    from bench.stateless_cpu import callgrind_control

    await callgrind_control(*args)


def _sqlite_share(folder: str) -> float:
    """Share of the newest dump's instructions in ``libsqlite3`` (``callgrind_annotate``'s
    per-object totals)."""
    newest = max(Path(folder).glob(f"cg.{os.getpid()}.*"), key=lambda p: int(p.suffix[1:]))
    out = subprocess.run(
        ["callgrind_annotate", "--threshold=100", "--show-percs=no", str(newest)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    found = re.search(r"^([\d,]+)\s+PROGRAM TOTALS", out, re.M)
    total = int(found[1].replace(",", "")) if found else 0
    lite = 0
    for line in out.splitlines():
        found = re.match(r"^\s*([\d,]+)\s.*libsqlite3", line)
        if found:
            lite += int(found[1].replace(",", ""))
    return lite / total if total else 0.0


async def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    from asgi_lifespan import LifespanManager

    from app.db.migrate import upgrade
    from app.main import create_app
    from app.settings import Settings
    from bench.inproc import quiet_logs

    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / 'turn.db'}"
        await asyncio.to_thread(upgrade, url)
        model = {"name": "scripted", "backend": "scripted"}
        settings = Settings(database_url=url, models=json.dumps([model]), api_keys=f"a:{KEY}",
                            sandbox_enabled=False, access_log=False,
                            session_cache_ttl_s=3600, tenant_budget_ttl_s=3600)  # fmt: skip
        app = create_app(settings)
        async with LifespanManager(app), quiet_logs("httpx", "agentstation.runs"):
            from app.cli import freeze_gc_heap

            freeze_gc_heap(None)  # the collector as ``serve`` sets it
            spec = {"name": "a", "spec": {"kind": "agent", "model": "scripted"}}
            status, body = await call(app, "POST", "/v1/agents", spec)
            assert status == 201, body
            for length in args.history:
                sessions = []
                for _ in range(args.sessions):
                    status, body = await call(app, "POST", "/v1/sessions", {"agent": "a"})
                    assert status == 201, body
                    sid = json.loads(body)["id"]
                    status, body = await call(
                        app, "PUT", f"/v1/sessions/{sid}/memory", history(length)
                    )
                    assert status == 200, body
                    sessions.append(sid)
                for mode in args.modes:
                    turn = {"message": "hello world", "stream": mode == "stream"}

                    async def many(
                        n: int, turn: dict[str, Any] = turn, sessions: list[str] = sessions
                    ) -> None:
                        """``n`` turns, ``--concurrency`` at once (each client its own
                        sessions, round robin)."""
                        left = [n]

                        async def client(mine: list[str]) -> None:
                            k = 0
                            while left[0] > 0:
                                left[0] -= 1
                                sid = mine[k % len(mine)]
                                k += 1
                                path = f"/v1/sessions/{sid}/messages"
                                status, body = await call(app, "POST", path, turn)
                                assert status == 200, body[-300:]

                        c = args.concurrency
                        await asyncio.gather(*(client(sessions[i::c]) for i in range(c)))

                    await many(args.sessions * 2)  # warm: every session's memory cached
                    await asyncio.sleep(0.1)
                    row: dict[str, Any] = {"history": length, "mode": mode}
                    if args.callgrind_dir:
                        from bench.callgrind import dumped

                        await _control("-i", "on")
                        await _control("-z")
                        await many(args.n)
                        await _control("-d")
                        await _control("-i", "off")
                        row["instructions"] = round(
                            dumped(Path(args.callgrind_dir), os.getpid()) / args.n
                        )
                        row["sqlite_share"] = round(_sqlite_share(args.callgrind_dir), 3)
                    else:
                        prof = cProfile.Profile()
                        prof.enable()
                        await many(args.n)
                        prof.disable()
                        if args.pstats:
                            prof.dump_stats(f"{args.pstats}.{length}.{mode}")
                        stats = pstats.Stats(prof)
                        row["calls"] = round(stats.total_calls / args.n)  # type: ignore[attr-defined]
                        if args.top:
                            table = stats.stats  # type: ignore[attr-defined]
                            most = sorted(table.items(), key=lambda kv: -kv[1][2])[: args.top]
                            row["top"] = [
                                f"{v[2] / args.n * 1e6:.1f}us {v[1] / args.n:.1f}x "
                                f"{Path(f).name}:{line}:{fn}"
                                for (f, line, fn), v in most
                            ]
                    rows.append(row)
    return rows


def _run_tree(tree: Path | None, argv: list[str]) -> list[dict[str, Any]]:
    """This module with ``argv`` in a fresh process on ``tree``'s code (None: this tree),
    under callgrind when ``--instructions`` is among ``argv``."""
    here = Path(__file__).resolve().parent.parent
    root = tree if tree is not None else here
    env = {**os.environ, "PYTHONPATH": str(root), "PYTHONHASHSEED": "0"}
    # This file runs from this tree (the baseline may not have it), the app from ``root``.
    code = "import runpy, sys; sys.argv = sys.argv[1:]; "
    code += "runpy.run_path(sys.argv[0], run_name='__main__')"
    inner = [a for a in argv if a != "--instructions"]
    cmd = [sys.executable, "-c", code, str(Path(__file__).resolve()), *inner, "--inner"]
    folder = None
    if "--instructions" in argv:
        folder = tempfile.mkdtemp(prefix="bench-sqt-")
        cmd = ["valgrind", "--tool=callgrind", "--instr-atstart=no",
               f"--callgrind-out-file={folder}/cg.%p", *cmd, "--callgrind-dir", folder]  # fmt: skip
    try:
        done = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True)
        if done.returncode:
            raise RuntimeError(done.stderr[-3000:])
        return [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    finally:
        if folder is not None:
            if os.environ.get("BENCH_KEEP_CALLGRIND"):
                print(f"callgrind dumps kept in {folder}", file=sys.stderr)
            else:
                shutil.rmtree(folder, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--history", type=int, nargs="+", default=[10, 1000])
    parser.add_argument("--modes", nargs="+", default=["json", "stream"])
    parser.add_argument("--n", type=int, default=200)
    parser.add_argument("--sessions", type=int, default=32)
    parser.add_argument("--concurrency", type=int, default=1, help="turns at once")
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--instructions", action="store_true", help="callgrind (slow)")
    parser.add_argument("--pstats", help="write each profile to PSTATS.<history>.<mode>")
    parser.add_argument("--baseline", type=Path, help="another checkout, run after this one")
    parser.add_argument("--inner", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--callgrind-dir", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.inner:
        for row in asyncio.run(measure(args)):
            print(json.dumps(row), flush=True)
        return 0
    raw = [a for a in (argv if argv is not None else sys.argv[1:])]
    with contextlib.suppress(ValueError):
        at = raw.index("--baseline")
        del raw[at : at + 2]
    trees: list[tuple[str, Path | None]] = [("new", None)]
    if args.baseline is not None:
        trees.append(("old", args.baseline.resolve()))
    for name, tree in trees:
        for row in _run_tree(tree, raw):
            print(json.dumps({"tree": name, **row}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
