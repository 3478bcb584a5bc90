"""Python calls per ``POST /v1/sessions``, per new conversation and per later turn (load-proof).

The app runs in process on a fresh PostgreSQL database (or SQLite), called directly through
ASGI (no sockets, no client library: uvicorn's own work, the same for every tree, is
left out). Per target, ``--n`` requests under cProfile: the Python and C calls per request
(``calls``), those of the gateway's own functions (``app_calls``), and the statements sent to
the database per request (``statements``: the raw statements reported to ``app.db.raw``'s
listeners plus SQLAlchemy's, from the engine's ``before_cursor_execute``). Targets:

- ``create``: ``POST /v1/sessions``;
- ``conversation``: a creation and the new session's first streamed turn;
- ``turn``: a later streamed turn of a session (round robin over 32);
- ``new_conversation``: ``POST /v1/conversations`` with one item (the Conversations API: a
  session of the first model's agent, the item its first memory entry).

``--bytecodes``: also the bytecodes the interpreter ran per request (``sys.settrace`` opcode
events, every thread: the event loop's own Python included, which a served gateway runs in
uvloop's C). ``--top K`` also prints the K functions with the most calls per request of each
target.
``python -m bench.session_calls [--db postgres] [--n 300] [--bytecodes] [--baseline DIR]
[--top 25] [--targets create new_conversation]``.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import json
import os
import pstats
import sys
import tempfile
from functools import partial
from pathlib import Path
from typing import Any

from bench.inproc import asgi_post, last_json, quiet_logs

KEY = "bench-key"
TARGETS = ("create", "conversation", "turn", "new_conversation")


HEADERS = [(b"content-type", b"application/json"), (b"authorization", b"Bearer " + KEY.encode())]


# One POST through the ASGI app, its body (a partial: no call of its own in the counts).
call = partial(asgi_post, headers=HEADERS)


async def _bytecodes(step: Any, n: int) -> int:
    """Bytecodes the interpreter ran (every thread's ``opcode`` trace events) over ``n`` awaits
    of ``step()``: a count of the Python work, whatever each call costs."""
    import threading

    count = [0]

    def trace(frame: Any, event: str, _arg: Any) -> Any:
        frame.f_trace_opcodes = True
        if event == "opcode":
            count[0] += 1
        return trace

    sys.settrace(trace)
    threading.settrace(trace)
    try:
        for _ in range(n):
            await step()
    finally:
        sys.settrace(None)
        threading.settrace(None)
    return count[0]


async def measure(
    db: str,
    url: str | None,
    n: int,
    top: int,
    dump: Path | None = None,
    opcodes: bool = False,
    targets: tuple[str, ...] = TARGETS,
) -> dict[str, Any]:
    import sqlalchemy as sa
    from asgi_lifespan import LifespanManager

    from app.db import raw
    from app.db.migrate import upgrade
    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        if url is None:
            url = f"sqlite+aiosqlite:///{Path(tmp) / 'calls.db'}"
            await asyncio.to_thread(upgrade, url)
        model = {"name": "scripted", "backend": "scripted"}
        settings = Settings(database_url=url, models=json.dumps([model]), api_keys=f"a:{KEY}",
                            sandbox_enabled=False, access_log=False,
                            session_cache_ttl_s=3600, tenant_budget_ttl_s=3600)  # fmt: skip
        app = create_app(settings)
        async with LifespanManager(app), quiet_logs("httpx", "agentstation.runs"):
            statements = [0]
            raw.listeners.append(lambda _sql: statements.__setitem__(0, statements[0] + 1))
            engine = app.state.agentstation.engine
            sa.event.listen(
                engine.sync_engine,
                "before_cursor_execute",
                lambda *_a: statements.__setitem__(0, statements[0] + 1),
            )
            agent = {"name": "a", "spec": {"kind": "agent", "model": "scripted"}}
            await call(app, "/v1/agents", json.dumps(agent).encode())
            create = json.dumps({"agent": "a"}).encode()
            turn = json.dumps({"message": "hello world", "stream": True}).encode()
            item = {"type": "message", "role": "user", "content": "hello world"}
            conversation = json.dumps({"items": [item], "metadata": {"k": "v"}}).encode()

            async def new() -> str:
                body = await call(app, "/v1/sessions", create)
                sid: str = json.loads(body)["id"]
                return sid

            async def turn_of(sid: str) -> None:
                body = await call(app, f"/v1/sessions/{sid}/messages", turn)
                assert b"run.completed" in body, body[-300:]

            sessions = [await new() for _ in range(32)]
            k = [0]

            async def one(target: str) -> None:
                if target == "create":
                    await new()
                elif target == "conversation":
                    await turn_of(await new())
                elif target == "new_conversation":
                    body = await call(app, "/v1/conversations", conversation)
                    assert b'"conversation"' in body, body
                else:
                    await turn_of(sessions[k[0] % len(sessions)])
                    k[0] += 1

            out: dict[str, Any] = {}
            for target in targets:
                for _ in range(20):  # warm
                    await one(target)
                await asyncio.sleep(0.2)  # background starts (kernels) settle
                prof = cProfile.Profile()
                statements[0] = 0
                prof.enable()
                for _ in range(n):
                    await one(target)
                prof.disable()
                stmts = statements[0]
                if dump is not None:
                    prof.dump_stats(f"{dump}.{target}")
                stats = pstats.Stats(prof)
                table = stats.stats  # type: ignore[attr-defined]
                app_calls = sum(
                    v[1]
                    for (file, _, _), v in table.items()
                    if f"{os.sep}app{os.sep}" in file and "site-packages" not in file
                )
                row: dict[str, Any] = {
                    "calls": round(stats.total_calls / n),  # type: ignore[attr-defined]
                    "app_calls": round(app_calls / n),
                    "statements": round(stmts / n, 2),
                }
                if top:
                    most = sorted(table.items(), key=lambda kv: -kv[1][1])[:top]
                    row["top"] = [
                        f"{v[1] / n:.1f} {Path(f).name}:{line}:{fn}" for (f, line, fn), v in most
                    ]
                if opcodes:
                    row["bytecodes"] = round(await _bytecodes(partial(one, target), n) / n)
                out[target] = row
            return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", default="postgres", choices=("postgres", "sqlite"))
    parser.add_argument("--n", type=int, default=300)
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--targets", nargs="+", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--baseline", type=Path, help="another checkout, measured after this one")
    parser.add_argument(
        "--bytecodes", action="store_true", help="also the bytecodes run per request (slow)"
    )
    parser.add_argument("--pstats", type=Path, help="write each target's profile to PSTATS.target")
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    url = args.url
    if url is None and args.db == "postgres":
        from bench.common import reset_postgres_db

        url = reset_postgres_db("agentstation_bench_calls_new")
    targets = tuple(args.targets)
    got = asyncio.run(measure(args.db, url, args.n, args.top, args.pstats, args.bytecodes, targets))
    if args.json:
        print(json.dumps(got))
        return 0
    print(json.dumps({"tree": "new", **got}), flush=True)
    if args.baseline is not None:
        base = args.baseline.resolve()
        base_url = None
        if args.db == "postgres":
            from bench.common import reset_postgres_db

            base_url = reset_postgres_db("agentstation_bench_calls_base", base)
        # This bench file on the baseline's code, with this tree's ``bench.inproc``.
        args_base = ["--json", "--db", args.db, "--n", str(args.n), "--top", str(args.top)]
        args_base += ["--targets", *targets]
        args_base += ["--bytecodes"] if args.bytecodes else []
        if base_url is not None:
            args_base += ["--url", base_url]
        print(json.dumps({"tree": "old", **last_json(base, __file__, args_base)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
