"""A stored Responses turn's fixed cost against a chat turn's, in process (load-proof counts).

The chains of ``bench.responses_chain_cpu`` (stored, streamed turns naming the previous
response; or, ``--target chat``, the same chains as streamed chat completions) with the
scripted model answering ``--words`` words (1: what is left is the turn's fixed cost). Per
turn: Python calls (cProfile), follower wake-ups (a live run's channel waking a follower that
waits for its next event: what a "push" delivery would remove) and event-loop iterations
(a second pass; iterations also count timers, which fire more often on a loaded machine), and
with ``--top N`` the N app/agents functions with the most calls under them (inclusive, a
``sys.setprofile`` count: where the fixed cost is). ``--instructions``: machine instructions per
turn instead (callgrind; ±3 % between runs of one tree: compare medians of a few runs).
``--baseline DIR``: the same, this file run on that checkout's code, after this tree's.

``python -m bench.fixed_cost [--target chat] [--words 1] [--top 40] [--baseline DIR]``
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

from bench import inproc
from bench.inproc import Instructions, callgrind, last_json


def _reply(words: int) -> str:
    return " ".join(f"word{i}" for i in range(words)) if words > 1 else "word"


def counted(target: str, words: int, chains: int, turns: int, top: int) -> dict[str, Any]:
    """Calls, follower wake-ups and loop iterations per turn (and the ``top`` inclusive); the
    module attributes it replaces are put back after."""
    import cProfile
    import pstats

    saved = inproc.REPLY, cProfile.Profile, pstats.Stats
    try:
        return _counted(target, words, chains, turns, top)
    finally:
        inproc.REPLY, cProfile.Profile, pstats.Stats = saved  # type: ignore[misc]


def _counted(target: str, words: int, chains: int, turns: int, top: int) -> dict[str, Any]:
    """Calls, follower wake-ups and loop iterations per turn (and the ``top`` inclusive)."""
    from app.runtime import events  # the tree's own (PYTHONPATH)
    from bench import responses_chain_cpu as chain_cpu

    inproc.REPLY = _reply(words)
    counts: collections.Counter[str] = collections.Counter()
    on = [False]  # inside ``measure``'s windows (its turns, not the app's start)
    wake = events.RunChannel._wake

    def counting_wake(channel: Any) -> None:
        if channel._waiters and on[0]:
            counts["follower_wakeups"] += 1
        wake(channel)

    run_once = asyncio.base_events.BaseEventLoop._run_once  # type: ignore[attr-defined]

    def counting_run_once(loop: Any) -> None:
        if on[0]:
            counts["loop_iterations"] += 1
        run_once(loop)

    calls = asyncio.run(chain_cpu.measure(chains, turns, True, target=target))
    # A second pass counts (the counters' own calls kept out of the first's).
    events.RunChannel._wake = counting_wake  # type: ignore[method-assign,assignment]
    asyncio.base_events.BaseEventLoop._run_once = counting_run_once  # type: ignore[attr-defined]
    _windows(chain_cpu, on)
    try:
        asyncio.run(chain_cpu.measure(chains, turns, True, target=target))
    finally:
        events.RunChannel._wake = wake  # type: ignore[method-assign]
        asyncio.base_events.BaseEventLoop._run_once = run_once  # type: ignore[attr-defined]
    n = chains * turns
    out: dict[str, Any] = {
        "target": target,
        "words": words,
        "calls": round(sum(calls) / len(calls), 1),
        "follower_wakeups": round(counts["follower_wakeups"] / n, 2),
        "loop_iterations": round(counts["loop_iterations"] / n, 2),
    }
    if top:
        out["inclusive"] = _inclusive(chain_cpu, target, chains, turns, top)
    return out


def _windows(chain_cpu: Any, on: list[bool]) -> None:
    """``measure``'s cProfile windows (one per turn number) switch ``on`` instead."""

    class Window:
        def enable(self) -> None:
            on[0] = True

        def disable(self) -> None:
            on[0] = False

    class Stats:
        def __init__(self, _: Any) -> None:
            self.total_calls = 0

    chain_cpu.cProfile.Profile, chain_cpu.pstats.Stats = Window, Stats


def _inclusive(chain_cpu: Any, target: str, chains: int, turns: int, top: int) -> list[Any]:
    """Per turn, the calls made while each app/agents function was on the stack."""
    under: collections.Counter[str] = collections.Counter()
    stack: list[str | None] = []
    roots = ("/app/", "/agents/")

    def key(frame: FrameType) -> str | None:
        name = frame.f_code.co_filename
        for root in roots:
            at = name.rfind(root)
            if at >= 0 and "site-packages" not in name:
                return f"{name[at + 1 :]}:{frame.f_code.co_name}"
        return None

    def count() -> None:
        for k in set(stack):
            if k is not None:
                under[k] += 1

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            stack.append(key(frame))
            count()
        elif event == "c_call":
            count()
        elif event == "return" and stack:
            stack.pop()

    class Profile:  # stands in for cProfile.Profile inside ``measure``
        def enable(self) -> None:
            stack.clear()
            sys.setprofile(profile)

        def disable(self) -> None:
            sys.setprofile(None)

    class Stats:
        def __init__(self, _: Any) -> None:
            self.total_calls = 0

    chain_cpu.cProfile.Profile, chain_cpu.pstats.Stats = Profile, Stats
    asyncio.run(chain_cpu.measure(chains, turns, True, target=target))
    n = chains * turns
    return [[k, round(v / n, 1)] for k, v in under.most_common(top)]


def instructions_here(target: str, words: int, chains: int, turns: int, out: Path) -> int:
    from bench import responses_chain_cpu as chain_cpu

    inproc.REPLY = _reply(words)
    got = asyncio.run(chain_cpu.measure(chains, turns, False, Instructions(out), target))
    return round(got[0])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=["responses", "chat"], default="responses")
    parser.add_argument("--words", type=int, default=1, help="the scripted model's reply")
    parser.add_argument("--chains", type=int, default=8)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--top", type=int, default=0, help="the N functions with most calls")
    parser.add_argument("--instructions", action="store_true", help="callgrind, per turn")
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--instructions-child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    shape = (args.target, args.words, args.chains, args.turns)
    if args.instructions_child is not None:
        count = instructions_here(*shape, out=args.instructions_child)
        print(json.dumps({"target": args.target, "words": args.words, "instructions": count}))
        return 0
    if args.json:
        print(json.dumps(counted(*shape, top=args.top)))
        return 0
    flags = ["--target", args.target, "--words", str(args.words)]
    flags += ["--chains", str(args.chains), "--turns", str(args.turns), "--top", str(args.top)]
    trees = [("new", Path(__file__).resolve().parent.parent)]
    if args.baseline is not None:
        trees.append(("old", args.baseline))
    for name, tree in trees:
        if args.instructions:
            with tempfile.TemporaryDirectory() as out:
                child = [*flags, "--instructions-child", out]
                got = last_json(tree, __file__, child, wrapper=callgrind(Path(out)))
        else:
            got = last_json(tree, __file__, [*flags, "--json"])
        print(json.dumps({"tree": name, **got}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
