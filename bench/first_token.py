"""Where a stored turn's time to its first token goes, in process (scripted model).

The app runs in this process (SQLite in a temporary file, or a fresh PostgreSQL database at
127.0.0.1:5432), driven through httpx's ASGI transport, one request at a time. Each turn is
streamed; the window measured is from the request's send to the client's first text delta.

- ``responses``: stored ``/v1/responses`` chain turns (each naming the previous response);
- ``session``: ``POST /v1/sessions/{id}/messages`` turns of one session, streamed;
- ``chat``: the same text as a streamed chat completion to the raw model (nothing stored).

Per target: the median wall time and loop-thread CPU (``time.thread_time``) of the window and
of its steps, marked by wrappers around the turn path's functions (the chain-end lookup,
``submit_turn``, the store's admission, the run's first step, the agent built with its memory,
the run's first delta, the client's first delta); in a second pass, the Python (and C) calls of
each step (``sys.setprofile`` counting: load-proof); with ``--top``, a cProfile of the windows
(the functions that cost most in them). Per step also the event loop's iterations (``iters``: a
counter on the loop's ``_run_once``; every wake-up of another task costs one, and with many
streams on one loop each waits behind all of them: load-proof), with the marks ``model_call``
and ``model_chunk`` (the scripted model called, its first chunk; ``--first-wait-ms``: a wait
before it, as an engine's) and ``last_chunk_to_end_iters`` (the model's last chunk to the
client's reading the terminal event).

``python -m bench.first_token [--db sqlite|postgres] [--turns 40] [--top 25]``: run from a
tree's root to measure that tree's code; another tree's with this file:
``python -m bench.inproc DIR bench/first_token.py [ARGS]`` (as bench/responses_chain_cpu.py's
``--baseline`` does: run as a script, bench/profile.py would shadow the standard library's).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import io
import itertools
import json
import pstats
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

from bench import inproc

Marks = list[tuple[str, float, float, int, int]]
MARKS: Marks = []  # (name, wall, thread CPU, calls so far, loop iterations so far) of a turn
CALLS = [0]  # Python and C calls counted by ``_count`` (the counting pass)
ITERS = [0]  # event loop iterations (``_run_once`` calls) so far: ``count_iterations``
# The loop iteration of the scripted model's latest chunk, and the iterations from its last
# (the finish chunk) to the client's reading the stream's terminal event
# (``response.completed``, ``[DONE]``), per turn.
LAST_CHUNK = [0]
TO_END: list[int] = []
FIRST_WAIT_S = [0.0]  # the scripted model's wait before its first chunk (``--first-wait-ms``)


SEGMENT: list[Any] = []  # (profiler, from mark, to mark): ``--segment`` profiles only that


def mark(name: str) -> None:
    MARKS.append((name, time.perf_counter(), time.thread_time(), CALLS[0], ITERS[0]))
    if SEGMENT and SEGMENT[0] is not None:  # the profiled pass
        prof, start, end = SEGMENT
        if name == start:
            prof.enable()
        elif name == end:
            prof.disable()


def count_iterations(loop: asyncio.AbstractEventLoop) -> Callable[[], None]:
    """Count the loop's iterations in ``ITERS`` (each ``BaseEventLoop._run_once`` call runs the
    callbacks that were ready when it began: a callback scheduled in one runs in the next, so
    a step that wakes another task costs one). Load-proof: the same path crosses the same
    iterations however busy the machine. Returns the undo."""
    original = loop._run_once  # type: ignore[attr-defined]

    def run_once() -> None:
        ITERS[0] += 1
        original()

    loop._run_once = run_once  # type: ignore[attr-defined]
    return lambda: delattr(loop, "_run_once")


def end_seen() -> None:
    """The client read the stream's terminal event."""
    TO_END.append(ITERS[0] - LAST_CHUNK[0])


def _mark_chunks() -> None:
    """The scripted model's chunks note their loop iteration (``LAST_CHUNK``); its call is
    the mark ``model_call`` (with a served model: the engine's request sent)."""
    from app.models.scripted import ScriptedModelLLM

    original: Any = ScriptedModelLLM._astream

    async def astream(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not any(m[0] == "model_call" for m in MARKS):  # the model is called (the engine's
            mark("model_call")  # request sent): iterations to here and from here on count
        if FIRST_WAIT_S[0]:  # as an engine's first token, after a wait (``--first-wait-ms``)
            await asyncio.sleep(FIRST_WAIT_S[0])
        async for chunk in original(self, *args, **kwargs):
            if not any(m[0] == "model_chunk" for m in MARKS):
                mark("model_chunk")  # its first token: the hops from here to the client count
            LAST_CHUNK[0] = ITERS[0]
            yield chunk

    ScriptedModelLLM._astream = astream  # type: ignore[method-assign]


def _count(_frame: Any, event: str, _arg: Any) -> None:
    if event == "call" or event == "c_call":
        CALLS[0] += 1


def _wrap_async(owner: Any, attr: str, before: str | None, after: str | None) -> None:
    original = getattr(owner, attr)

    async def wrapped(*args: Any, **kwargs: Any) -> Any:
        if before:
            mark(before)
        try:
            return await original(*args, **kwargs)
        finally:
            if after:
                mark(after)

    setattr(owner, attr, wrapped)


def instrument() -> None:
    """Marks at the turn path's steps (names that a tree lacks are skipped)."""
    from app.runtime import execution, runs
    from app.runtime.events import RunChannel
    from app.services import responses, responses_plan, turns

    _mark_chunks()

    _wrap_async(responses_plan, "chain_end", "chain_end<", "chain_end>")
    _wrap_async(responses, "submit_turn", "submit<", "submit>")
    _wrap_async(turns, "prepare_submission", None, "looked_up")
    for name in ("execute",):
        if hasattr(runs, name):
            _wrap_async(runs, name, "task_step", None)
    if hasattr(execution, "_begin"):
        _wrap_async(execution, "_begin", None, "agent_ready")

    def first_delta() -> None:
        if not any(m[0] == "run_delta" for m in MARKS):
            mark("run_delta")

    if hasattr(RunChannel, "put_delta"):  # the segmenter's (a plain function since h/chain32)
        original_put: Any = RunChannel.put_delta

        def put_delta(self: RunChannel, *args: Any, **kwargs: Any) -> None:
            first_delta()
            original_put(self, *args, **kwargs)

        RunChannel.put_delta = put_delta  # type: ignore[method-assign]
    else:
        original_delta: Any = RunChannel.delta

        async def delta(self: RunChannel, *args: Any, **kwargs: Any) -> None:
            first_delta()
            await original_delta(self, *args, **kwargs)

        RunChannel.delta = delta  # type: ignore[method-assign]


def instrument_store(store: Any) -> None:
    for name in ("admit",):
        _wrap_async(store, name, "admit<", "admit>")


def app_client(db: str, gap_s: float) -> Any:
    """The app in process (``bench.inproc``), its store's admission marked."""

    def marked(app: Any) -> None:
        instrument_store(app.state.agentstation.run_manager.store)

    return inproc.app_client("first_token", db=db, chunk_delay_s=gap_s, on_app=marked)


Turn = Callable[[Any, int, Callable[[], None]], Any]


def responses_turn() -> Turn:
    previous: list[str | None] = [None]

    async def turn(client: Any, k: int, first: Callable[[], None]) -> None:
        body: dict[str, Any] = {"model": "scripted", "input": f"turn {k}: tell me a story.",
                                "stream": True, "max_output_tokens": 64}  # fmt: skip
        if previous[0]:
            body["previous_response_id"] = previous[0]
        seen = False
        async with client.stream("POST", "/v1/responses", json=body) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for line in resp.aiter_lines():
                if not seen and '"response.output_text.delta"' in line:
                    seen = True
                    first()
                if line == "event: response.completed":
                    end_seen()
                if '"response.created"' in line and line[:6] == "data: ":
                    previous[0] = json.loads(line[6:])["response"]["id"]

    return turn


def session_turn(session: str) -> Turn:
    async def turn(client: Any, k: int, first: Callable[[], None]) -> None:
        body = {"message": f"turn {k}: tell me a story.", "stream": True}
        seen = False
        async with client.stream("POST", f"/v1/sessions/{session}/messages", json=body) as resp:
            assert resp.status_code == 200, await resp.aread()
            async for line in resp.aiter_lines():
                if not seen and "message.delta" in line:
                    seen = True
                    first()
                if line == "event: run.completed":
                    end_seen()

    return turn


def chat_turn() -> Turn:
    async def turn(client: Any, k: int, first: Callable[[], None]) -> None:
        user = {"role": "user", "content": f"turn {k}: tell me a story."}
        body = {"model": "scripted", "stream": True, "max_tokens": 64, "messages": [user]}
        seen = False
        async with client.stream("POST", "/v1/chat/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                # A text delta (not the role's first chunk, whose content is empty).
                bare = line.replace(" ", "")
                if not seen and '"content":"' in bare and '"content":""' not in bare:
                    seen = True
                    first()
                if line == "data: [DONE]":
                    end_seen()

    return turn


async def run_target(client: Any, target: str, turns: int, mode: str) -> dict[str, Any]:
    """Per step: median wall and CPU (``mode`` "timed"), calls ("counted": ``sys.setprofile``
    counts every call, per step), or a cProfile of the windows ("profiled")."""
    if target == "session":
        await client.post("/v1/agents", json={"name": "bench", "spec": {"model": "scripted"}})
        made = await client.post("/v1/sessions", json={"agent": "bench"})
        assert made.status_code in (200, 201), made.text
        turn = session_turn(made.json()["id"])
    else:
        turn = responses_turn() if target == "responses" else chat_turn()
    for k in range(5):  # warm up: caches, first-use paths
        await turn(client, k, lambda: None)
    prof = cProfile.Profile() if mode == "profiled" else None
    if prof is not None and SEGMENT:
        SEGMENT[0] = prof
        prof = None  # enabled and disabled by ``mark``
    steps: dict[str, list[tuple[float, float, int, int]]] = {}
    undo = count_iterations(asyncio.get_running_loop())
    TO_END.clear()
    for k in range(turns):
        MARKS.clear()

        def first() -> None:
            mark("client_delta")
            if prof is not None:
                prof.disable()
            if mode == "counted":
                sys.setprofile(None)

        mark("send")
        if prof is not None:
            prof.enable()
        if mode == "counted":
            sys.setprofile(_count)
        await turn(client, 5 + k, first)
        sys.setprofile(None)
        names = [m[0] for m in MARKS]
        if "client_delta" not in names:
            continue
        end = names.index("client_delta")
        window = MARKS[: end + 1]
        for (_, w0, c0, n0, i0), (name, w1, c1, n1, i1) in itertools.pairwise(window):
            steps.setdefault(name, []).append((w1 - w0, c1 - c0, n1 - n0, i1 - i0))
        a, b = window[0], window[-1]
        total = (b[1] - a[1], b[2] - a[2], b[3] - a[3], b[4] - a[4])
        steps.setdefault("TOTAL", []).append(total)
    undo()
    if mode == "counted":
        return {name: round(statistics.median(s[2] for s in v)) for name, v in steps.items()}
    out: dict[str, Any] = {
        name: {
            "wall_us": round(1e6 * statistics.median(s[0] for s in v)),
            "cpu_us": round(1e6 * statistics.median(s[1] for s in v)),
            "wall_max_us": round(1e6 * max(s[0] for s in v)),
            # Loop iterations in the step (a wake-up of another task costs one): the median,
            # and min-max (a timer or another task's callback may add one now and then).
            "iters": statistics.median(s[3] for s in v),
            "iters_range": f"{min(s[3] for s in v)}-{max(s[3] for s in v)}",
            "n": len(v),
        }
        for name, v in steps.items()
    }
    if TO_END:  # the client's last text delta -> the stream's terminal event
        out["last_chunk_to_end_iters"] = statistics.median(TO_END)
        out["last_chunk_to_end_range"] = f"{min(TO_END)}-{max(TO_END)}"
    if mode == "profiled":
        stats = pstats.Stats(SEGMENT[0] if SEGMENT else prof)
        out["calls_per_turn"] = round(stats.total_calls / turns)  # type: ignore[attr-defined]
        out["_stats"] = stats
    return out


async def main_async(db: str, targets: list[str], turns: int, top: int, gap_s: float) -> None:
    instrument()
    for target in targets:
        async with app_client(db, gap_s) as client:
            timed = await run_target(client, target, turns, "timed")
        async with app_client(db, gap_s) as client:
            counted = await run_target(client, target, turns, "counted")
        for name, calls in counted.items():
            if name in timed:
                timed[name]["calls"] = calls
        print(json.dumps({"db": db, "target": target, "steps": timed}), flush=True)
        if top:
            async with app_client(db, gap_s) as client:
                profiled = await run_target(client, target, turns, "profiled")
            stats = profiled.pop("_stats")
            for order in ("tottime", "cumulative"):
                buf = io.StringIO()
                stats.stream = buf
                stats.sort_stats(order).print_stats(top)
                print(f"--- {target} top {top} by {order} ({turns} turns) ---")
                print(buf.getvalue().split("ncalls", 1)[-1][:20000])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--db", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--targets", nargs="+", default=["responses", "session", "chat"])
    parser.add_argument("--turns", type=int, default=40)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--segment", nargs=2, help="profile only from one mark to another")
    parser.add_argument("--gap-ms", type=float, default=1.0, help="the model's time per token")
    what = "the model's wait before its first token (0: it comes at once, in its call's step)"
    parser.add_argument("--first-wait-ms", type=float, default=0.0, help=what)
    args = parser.parse_args(argv)
    FIRST_WAIT_S[0] = args.first_wait_ms / 1000
    if args.segment:
        SEGMENT[:] = [None, *args.segment]
    asyncio.run(main_async(args.db, args.targets, args.turns, args.top, args.gap_ms / 1000))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
