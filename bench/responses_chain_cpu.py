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

TTFT: httpx's ``ASGITransport`` hands the client the body only once the response is complete,
so through it the "first token" is the whole answer (``whole_p50_ms``, what this bench reported
as ``ttft_p50_ms`` before 2026-11-29). ``ttft_p50_ms`` is the first token's: the app driven by
``bench.asgi_stream.StreamingASGITransport`` (each body chunk as it is sent) with the scripted
model taking ``TOKEN_GAP_S`` per token after the first (as a real model does: the run's task
waits between tokens); ``ttft_calls`` the Python calls from the request's send to the client's
first text delta (cProfile, load-proof), and ``*_cpu_us`` in ``ttft_p50_ms`` the event loop
thread's CPU in that window (``time.thread_time``: the app and the client share the thread;
unlike the wall time, it does not count the time the thread waited for a core).

``python -m bench.responses_chain_cpu [--chains 8] [--turns 20] [--baseline DIR]``: with a
baseline, the same measurement runs in a subprocess on that checkout's code (``PYTHONPATH``,
``bench.inproc.run_in_tree``). ``--instructions``: instead, the machine instructions per stored
turn (all turns, the client's included), each tree's run under callgrind (load-proof; ~50x
slower: ``--chains 4 --turns 5`` takes about a minute a tree). ``--calls-only``: only the
Python calls per turn, each tree in its own process. ``--target chat`` (with either): the same
chains as streamed chat completions, the client resending the history (the chat path's side).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import json
import pstats
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.inproc import Instructions, app_client, callgrind, last_json

TOKEN_GAP_S = 0.001  # the streamed TTFT's model: 1 ms per token after the first


async def measure(
    chains: int, turns: int, profile: bool, instructions: Any = None, target: str = "responses"
) -> list[float]:
    """Per turn number: CPU seconds per turn (or Python calls per turn with ``profile``; with
    ``instructions``, a ``bench.inproc.Instructions``: one number, instructions per turn).
    ``target`` ``chat``: the same chains as streamed chat completions (the client resending
    the history and reading every chunk), for the chat path's side of the same figures."""
    async with app_client("chains", streamed=False) as client:
        history: dict[str | None, list[dict[str, str]]] = {}

        async def chat_turn(text: str, previous: str | None) -> str:
            key = previous or f"chain-{len(history)}"
            messages = history.pop(key, [])
            messages.append({"role": "user", "content": text})
            body = {"model": "scripted", "messages": messages, "stream": True,
                    "max_tokens": 64, "temperature": 0}  # fmt: skip
            answer = ""
            async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
                assert resp.status_code == 200, await resp.aread()
                async for line in resp.aiter_lines():
                    if line[:7] == "data: {":
                        for choice in json.loads(line[6:]).get("choices") or []:
                            answer += choice["delta"].get("content") or ""
            messages.append({"role": "assistant", "content": answer})
            history[key] = messages
            return key

        async def turn(text: str, previous: str | None) -> str:
            if target == "chat":
                return await chat_turn(text, previous)
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
        if instructions is not None:  # all turns in one window (valgrind: ~50x slower)
            # The objects alive before the window out of the collector's way: a full
            # collection over the app's whole heap falls inside the window or not, by a few
            # allocations more or less (±2.5 % between runs of one tree, and between trees).
            gc.collect()
            gc.freeze()
            instructions.start()
            for k in range(turns):
                for i in range(chains):
                    text = f"Chain {i}, turn {k + 1}: tell me a story."
                    previous[i] = await turn(text, previous[i])
            got = instructions.stop()
            gc.unfreeze()
            return [got / (chains * turns)]
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


async def ttft(
    chains: int, turns: int, streamed: bool = False, profile: bool = False
) -> dict[str, float]:
    """TTFT p50 (ms, request sent -> first text delta) of stored chain turns and of the same
    turns as chat completions (the client resending the history), alternating turn by turn.
    ``streamed``: through a transport that streams the body, the model taking ``TOKEN_GAP_S``
    per token (else httpx's, which returns the whole body: the time to the whole answer);
    ``profile``: Python calls per turn in that window instead (cProfile)."""
    delay = TOKEN_GAP_S if streamed else None
    async with app_client("ttft", streamed=streamed, chunk_delay_s=delay) as client:
        got: dict[str, list[float]] = {"responses": [], "chat": []}
        prof = cProfile.Profile() if profile else None
        calls = {"responses": 0, "chat": 0}
        cpu: dict[str, list[float]] = {"responses": [], "chat": []}
        began = [0.0]

        def begin() -> float:
            if prof is not None:
                prof.enable()
            began[0] = time.thread_time()
            return time.perf_counter()

        def first_at(start: float, target: str) -> float:
            took = time.perf_counter() - start
            cpu[target].append(time.thread_time() - began[0])
            if prof is not None:
                prof.disable()
                stats = pstats.Stats(prof)
                calls[target] += stats.total_calls  # type: ignore[attr-defined]
                prof.clear()
            return took

        for i in range(chains):
            previous: str | None = None
            messages: list[dict[str, str]] = []
            for k in range(turns):
                text = f"Chain {i}, turn {k + 1}: tell me a story."
                body: dict[str, Any] = {"model": "scripted", "input": text}
                body.update(stream=True, max_output_tokens=64)
                if previous:
                    body["previous_response_id"] = previous
                start, first = begin(), 0.0
                async with client.stream("POST", "/v1/responses", json=body) as resp:
                    async for line in resp.aiter_lines():
                        if not first and '"response.output_text.delta"' in line:
                            first = first_at(start, "responses")
                        if '"response.created"' in line and line[:6] == "data: ":
                            previous = json.loads(line[6:])["response"]["id"]
                got["responses"].append(first)
                messages.append({"role": "user", "content": text})
                chat = {"model": "scripted", "messages": messages, "stream": True,
                        "max_tokens": 64}  # fmt: skip
                start, first, answer = begin(), 0.0, ""
                async with client.stream("POST", "/v1/chat/completions", json=chat) as resp:
                    async for line in resp.aiter_lines():
                        if line[:7] != "data: {":
                            continue
                        for choice in json.loads(line[6:]).get("choices") or []:
                            piece = choice["delta"].get("content") or ""
                            if piece and not first:
                                first = first_at(start, "chat")
                            answer += piece
                got["chat"].append(first)
                messages.append({"role": "assistant", "content": answer})
        if profile:
            return {k: round(v / (chains * turns)) for k, v in calls.items()}
        out = {k: round(1000 * statistics.median(v), 2) for k, v in got.items()}
        if streamed:  # the event loop thread's CPU in the window (load-proof-ish)
            out |= {f"{k}_cpu_us": round(1e6 * statistics.median(v)) for k, v in cpu.items()}
        return out


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
        "ttft_p50_ms": asyncio.run(ttft(4, 10, streamed=True)),  # + the loop's CPU in it
        "ttft_calls": asyncio.run(ttft(4, 10, streamed=True, profile=True)),
        "whole_p50_ms": asyncio.run(ttft(4, 10)),
    }


def instructions_here(chains: int, turns: int, out: Path, target: str) -> dict[str, Any]:
    """Under callgrind (``--instructions``' child): instructions per stored turn (per chat
    turn with ``target`` chat)."""
    got = asyncio.run(measure(chains, turns, False, Instructions(out), target))
    return {"target": target, "instructions_per_turn": round(got[0])}


def instructions(args: argparse.Namespace) -> None:
    """``--instructions``: this tree's, then the baseline's, each a bench file run under
    callgrind (the in-process client's instructions are counted too, the same on both)."""
    flags = ["--chains", str(args.chains), "--turns", str(args.turns), "--target", args.target]
    flags.append("--instructions-child")
    trees = [("new", Path(__file__).resolve().parent.parent)]
    if args.baseline is not None:
        trees.append(("old", args.baseline))
    for name, tree in trees:
        with tempfile.TemporaryDirectory() as out:
            got = last_json(tree, __file__, [*flags, out], wrapper=callgrind(Path(out)))
        print(json.dumps({"tree": name, "chains": args.chains, "turns": args.turns, **got}))


def calls_only(args: argparse.Namespace) -> None:
    """``--calls-only``: Python calls per turn of ``--target``, this tree's then the
    baseline's (each in its own process)."""
    flags = ["--chains", str(args.chains), "--turns", str(args.turns), "--target", args.target]
    if args.json:
        calls = asyncio.run(measure(args.chains, args.turns, True, target=args.target))
        print(json.dumps({"target": args.target, "calls": summary(calls, 1.0)}))
        return
    trees = [("new", Path(__file__).resolve().parent.parent)]
    if args.baseline is not None:
        trees.append(("old", args.baseline))
    for name, tree in trees:
        got = last_json(tree, __file__, [*flags, "--calls-only", "--json"])
        print(json.dumps({"tree": name, "chains": args.chains, "turns": args.turns, **got}))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3, help="CPU passes (median per turn)")
    parser.add_argument("--baseline", type=Path, help="another checkout, measured after this one")
    what = "instructions per stored turn instead (callgrind: load-proof)"
    parser.add_argument("--instructions", action="store_true", help=what)
    what = "chat: the same chains as chat completions (--instructions and --calls-only)"
    parser.add_argument("--target", choices=["responses", "chat"], default="responses", help=what)
    what = "only the Python calls per turn (cProfile; load-proof, a few seconds a tree)"
    parser.add_argument("--calls-only", action="store_true", help=what)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--instructions-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.instructions_child is not None:
        got = instructions_here(args.chains, args.turns, args.instructions_child, args.target)
        print(json.dumps(got))
        return 0
    if args.instructions:
        instructions(args)
        return 0
    if args.calls_only:
        calls_only(args)
        return 0
    got = run_here(args.chains, args.turns, args.rounds)
    if args.json:
        print(json.dumps(got))
        return 0
    print(json.dumps({"tree": "new", **got}), flush=True)
    if args.baseline is not None:
        flags = ["--json", "--chains", str(args.chains), "--turns", str(args.turns)]
        flags += ["--rounds", str(args.rounds)]
        print(json.dumps({"tree": "old", **last_json(args.baseline, __file__, flags)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
