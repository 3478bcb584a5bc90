"""CPU and Python calls per stored ``previous_response_id`` chain turn, in process (load-proof
calls; CPU side by side).

The app runs in this process on a fresh SQLite database with the scripted model answering
64 words per turn, driven through httpx's ASGI transport (the client's work included, the same
for every tree). ``--chains`` chains of ``--turns`` streamed, stored turns (``store: true``,
each naming the previous response), turn by turn across the chains. Per turn number: the
event loop thread's CPU (``time.thread_time``) per turn and, in a second pass under cProfile,
Python calls per turn (they do not move with the machine's load). Prints turn 1-3 and the last
three turns' means, so growth with the history shows; and the TTFT p50 (wall: noisy) of 4
chains × 10 stored turns against the same turns as chat completions, in process.

``python -m bench.responses_chain_cpu [--chains 8] [--turns 20] [--baseline DIR]``: with a
baseline, the same measurement runs in a subprocess on that checkout's code (``PYTHONPATH``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import json
import logging
import os
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import httpx

KEY = "bench-key"
REPLY = " ".join(f"word{i}" for i in range(64))


@contextlib.asynccontextmanager
async def _app_client(db_file: str) -> AsyncIterator[httpx.AsyncClient]:
    """The app, started in this process on a fresh SQLite database (``db_file``) with the
    scripted model answering REPLY, and a client with its key through the ASGI transport."""
    import httpx
    from asgi_lifespan import LifespanManager

    from app.db.migrate import upgrade
    from app.main import create_app
    from app.settings import Settings

    with tempfile.TemporaryDirectory() as tmp:
        url = f"sqlite+aiosqlite:///{Path(tmp) / db_file}"
        await asyncio.to_thread(upgrade, url)
        models = [{"name": "scripted", "backend": "scripted", "replies": [REPLY]}]
        settings = Settings(database_url=url, models=json.dumps(models), api_keys=f"a:{KEY}",
                            sandbox_enabled=False, access_log=False)  # fmt: skip
        app = create_app(settings)
        async with LifespanManager(app):
            for name in ("httpx", "agentstation.runs"):
                logging.getLogger(name).setLevel(logging.WARNING)
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {KEY}"}
            async with httpx.AsyncClient(
                transport=transport, base_url="http://t", headers=headers
            ) as client:
                yield client


async def measure(chains: int, turns: int, profile: bool) -> list[float]:
    """Per turn number: CPU seconds per turn (or Python calls per turn with ``profile``)."""
    async with _app_client("chains.db") as client:

        async def turn(text: str, previous: str | None) -> str:
            body: dict[str, Any] = {"model": "scripted", "input": text, "stream": True,
                                    "max_output_tokens": 64, "temperature": 0}  # fmt: skip
            if previous:
                body["previous_response_id"] = previous
            rid = ""
            async with client.stream("POST", "/v1/responses", json=body) as resp:
                assert resp.status_code == 200, await resp.aread()
                async for line in resp.aiter_lines():
                    if not rid and '"response.created"' in line and line[:6] == "data: ":
                        rid = json.loads(line[6:])["response"]["id"]
            return rid

        warm: str | None = None
        for k in range(3):
            warm = await turn(f"warm {k}", warm)
        previous: list[str | None] = [None] * chains
        out = []
        for k in range(turns):
            prof = cProfile.Profile() if profile else None
            if prof is not None:
                prof.enable()
            start = time.thread_time()
            for i in range(chains):
                text = f"Chain {i}, turn {k + 1}: tell me a story."
                previous[i] = await turn(text, previous[i])
            cpu = time.thread_time() - start
            if prof is not None:
                prof.disable()
                calls = pstats.Stats(prof).total_calls  # type: ignore[attr-defined]
                out.append(calls / chains)
            else:
                out.append(cpu / chains)
        return out


async def ttft(chains: int, turns: int) -> dict[str, float]:
    """TTFT p50 (ms, request sent -> first text delta) of stored chain turns and of the same
    turns as chat completions (the client resending the history), alternating turn by turn."""
    async with _app_client("ttft.db") as client:
        got: dict[str, list[float]] = {"responses": [], "chat": []}
        for i in range(chains):
            previous: str | None = None
            messages: list[dict[str, str]] = []
            for k in range(turns):
                text = f"Chain {i}, turn {k + 1}: tell me a story."
                body: dict[str, Any] = {"model": "scripted", "input": text}
                body.update(stream=True, max_output_tokens=64)
                if previous:
                    body["previous_response_id"] = previous
                start, first = time.perf_counter(), 0.0
                async with client.stream("POST", "/v1/responses", json=body) as resp:
                    async for line in resp.aiter_lines():
                        if not first and '"response.output_text.delta"' in line:
                            first = time.perf_counter() - start
                        if '"response.created"' in line and line[:6] == "data: ":
                            previous = json.loads(line[6:])["response"]["id"]
                got["responses"].append(first)
                messages.append({"role": "user", "content": text})
                chat = {"model": "scripted", "messages": messages, "stream": True,
                        "max_tokens": 64}  # fmt: skip
                start, first, answer = time.perf_counter(), 0.0, ""
                async with client.stream("POST", "/v1/chat/completions", json=chat) as resp:
                    async for line in resp.aiter_lines():
                        if line[:7] != "data: {":
                            continue
                        for choice in json.loads(line[6:]).get("choices") or []:
                            piece = choice["delta"].get("content") or ""
                            if piece and not first:
                                first = time.perf_counter() - start
                            answer += piece
                got["chat"].append(first)
                messages.append({"role": "assistant", "content": answer})
        return {k: round(1000 * statistics.median(v), 2) for k, v in got.items()}


def summary(values: list[float], scale: float) -> dict[str, float]:
    return {
        "first3": round(statistics.mean(values[:3]) * scale, 1),
        "last3": round(statistics.mean(values[-3:]) * scale, 1),
        "all": round(statistics.mean(values) * scale, 1),
    }


def run_here(chains: int, turns: int, rounds: int) -> dict[str, Any]:
    cpus = [asyncio.run(measure(chains, turns, False)) for _ in range(rounds)]
    per_turn = [statistics.median(c[k] for c in cpus) for k in range(turns)]
    calls = asyncio.run(measure(chains, turns, True))
    return {
        "cpu_us": summary(per_turn, 1e6),
        "calls": summary(calls, 1.0),
        "ttft_p50_ms": asyncio.run(ttft(4, 10)),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="CPU passes (median per turn)")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured after this one")
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    got = run_here(args.chains, args.turns, args.rounds)
    if args.json:
        print(json.dumps(got))
        return 0
    print(json.dumps({"tree": "new", **got}), flush=True)
    if args.baseline is not None:
        base = args.baseline.resolve()
        env = {**os.environ, "PYTHONPATH": str(base)}
        # Run by path from the baseline's root (not as a script: bench/profile.py would shadow
        # the standard library's ``profile`` that cProfile imports).
        flags = ["--json", "--chains", str(args.chains), "--turns", str(args.turns)]
        flags += ["--rounds", str(args.rounds)]
        code = "import runpy, sys; sys.argv = sys.argv[1:]; "
        code += "runpy.run_path(sys.argv[0], run_name='__main__')"
        cmd = [sys.executable, "-c", code, str(Path(__file__).resolve()), *flags]
        done = subprocess.run(cmd, cwd=base, env=env, capture_output=True, text=True, check=True)
        print(json.dumps({"tree": "old", **json.loads(done.stdout.strip().splitlines()[-1])}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
