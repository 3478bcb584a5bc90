"""Where a persisted turn's time to first token goes, per phase (TTFT attribution).

``install()`` (run in the gateway process by ``bench/turn_trace_site/sitecustomize.py`` when
``TRACE_TURNS`` names a file) wraps a few runtime functions to take a timestamp per run: the
request's lookup starts (``t0``), the admission is called and returns, the run's task starts,
the model call starts, the engine's first token, the first ``message.delta``; they are written
to the file at exit, a JSON line per run. It changes nothing else (wrappers only)::

    PYTHONPATH=bench/turn_trace_site:. TRACE_TURNS=/tmp/turns.jsonl \\
        .venv/bin/python -m bench.engine_sessions --db postgres --rounds 2 --history-sessions 1
    .venv/bin/python -m bench.turn_trace /tmp/turns.jsonl

``main`` groups the runs by round (starts more than 0.3 s apart) and prints the medians of each
phase in milliseconds.
"""

from __future__ import annotations

import atexit
import contextvars
import itertools
import json
import os
import statistics
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

PHASES = ("t0", "admitted", "task", "model", "tok", "delta")


def install(path: str) -> None:
    """Wrap the runtime's functions to record each run's phase timestamps into ``path``."""
    import app.ops.instrument as instrument
    import app.runtime.events as events
    import app.runtime.runs as runs
    import app.services.turns as services
    from app.ops.logging import run_id_var

    stamps: dict[str, dict[str, float]] = {}
    started: contextvars.ContextVar[float] = contextvars.ContextVar("t0", default=0.0)
    execute = runs.execute  # type: ignore[attr-defined]
    prepare, submit = services.prepare_submission, runs.RunManager.submit
    astream, append = instrument.InstrumentedLLM.astream, events.RunChannel._append

    async def traced_prepare(*args: Any, **kwargs: Any) -> Any:
        started.set(time.perf_counter())
        return await prepare(*args, **kwargs)

    async def traced_submit(self: Any, *args: Any, **kwargs: Any) -> Any:
        run, created = await submit(self, *args, **kwargs)
        stamps.setdefault(run.id, {}).update(t0=started.get(), admitted=time.perf_counter())
        return run, created

    async def traced_execute(deps: Any, job: Any) -> None:
        stamps.setdefault(job.run_id, {})["task"] = time.perf_counter()
        await execute(deps, job)

    async def traced_astream(self: Any, messages: Any, **kwargs: Any) -> AsyncIterator[Any]:
        run = stamps.setdefault(run_id_var.get() or "", {})
        run.setdefault("model", time.perf_counter())
        async for delta in astream(self, messages, **kwargs):
            if delta.text and "tok" not in run:
                run["tok"] = time.perf_counter()
            yield delta

    def traced_append(self: Any, type_: Any, data: dict[str, Any]) -> Any:
        if type_ == "message.delta":
            stamps.setdefault(self.run_id, {}).setdefault("delta", time.perf_counter())
        return append(self, type_, data)  # RunChannel._append is a plain function

    services.prepare_submission = traced_prepare
    runs.RunManager.submit = traced_submit  # type: ignore[method-assign]
    runs.execute = traced_execute  # type: ignore[attr-defined]
    instrument.InstrumentedLLM.astream = traced_astream  # type: ignore[method-assign]
    events.RunChannel._append = traced_append  # type: ignore[method-assign]

    def dump() -> None:
        with open(path, "a") as out:
            for run_id, marks in stamps.items():
                out.write(json.dumps({"run": run_id, **marks}) + "\n")

    atexit.register(dump)


def main(path: str) -> None:
    """Print the medians of each phase per round."""
    rows = [json.loads(line) for line in open(path)]
    rows = sorted((r for r in rows if all(r.get(p) for p in PHASES)), key=lambda r: r["t0"])
    rounds: list[list[dict[str, float]]] = []
    for row in rows:
        if not rounds or row["t0"] - rounds[-1][-1]["t0"] > 0.3:
            rounds.append([])
        rounds[-1].append(row)
    print("| runs | lookup+admission | to the run's task | to the model call | engine TTFT"
          " | to the first event | total |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for group in rounds:
        cells: list[float] = [len(group)]
        for a, b in [*itertools.pairwise(PHASES), ("t0", "delta")]:
            cells.append(round(1000 * statistics.median(r[b] - r[a] for r in group), 2))
        print("| " + " | ".join(str(c) for c in cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else os.environ["TRACE_TURNS"])
