"""Output: the console table, bench/results/*.json, PNG plots, bench/README.md's tables."""

from __future__ import annotations

import json
import re
import sys
import time
from collections.abc import Sequence
from typing import Any

from bench.common import BENCH_DIR, RESULTS_DIR, BenchResult, Goal, machine_description

README = BENCH_DIR / "README.md"
START, END = "<!-- bench:results:start -->", "<!-- bench:results:end -->"


def _fmt(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:,.2f}" if abs(value) < 100 else f"{value:,.0f}"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value).replace("|", "\\|")


def markdown_table(rows: Sequence[dict[str, Any]]) -> str:
    """Rows (dicts sharing keys) as a Markdown table; columns in first-seen order."""
    if not rows:
        return ""
    cols: list[str] = []
    for row in rows:
        cols += [k for k in row if k not in cols]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    lines += ["| " + " | ".join(_fmt(r.get(c, "")) for c in cols) + " |" for r in rows]
    return "\n".join(lines)


def goals_table(results: Sequence[BenchResult]) -> str:
    """Every goal of every benchmark: target, measured, met, margin."""
    rows = []
    for res in results:
        for g in res.goals:
            met = "not measured" if g.met is None else ("met" if g.met else "NOT met")
            rows.append(
                {
                    "benchmark": res.name,
                    "goal": g.name,
                    "target": g.target,
                    "measured": g.measured,
                    "result": met,
                    "margin": g.margin,
                }
            )
    return markdown_table(rows)


def render(result: BenchResult) -> str:
    """One benchmark's section: status, table, notes, plots."""
    out = [f"### {result.name}", ""]
    if result.skipped:
        return "\n".join([*out, f"Skipped: {result.skipped}", ""])
    out += [f"({result.elapsed_s:.0f} s)", "", markdown_table(result.rows), ""]
    out += [f"- {note}" for note in result.notes]
    if result.sidebyside:
        out += ["", "Side by side, this tree (new) and the baseline (old), same rounds:", ""]
        out += [markdown_table(result.sidebyside)]
    if result.output:
        out += ["", "```", result.output.rstrip(), "```"]
    out += [f"\n![{result.name}](results/{plot})" for plot in result.plots]
    return "\n".join([*out, ""])


def write_json(result: BenchResult, suffix: str = "") -> None:
    """bench/results/<name><suffix>.json (written atomically); a side-by-side run's suffix
    is ``-sidebyside``, so the plain run's file (and the README block built from it) stays."""
    RESULTS_DIR.mkdir(exist_ok=True)
    tmp = RESULTS_DIR / f"{result.name}{suffix}.json.tmp"
    tmp.write_text(json.dumps(result.to_json(), indent=2, default=str) + "\n")
    tmp.replace(RESULTS_DIR / f"{result.name}{suffix}.json")


def finish_standalone(
    name: str,
    argv: Sequence[str] | None,
    rows: list[dict[str, Any]],
    goals: list[dict[str, Any]],
    sidebyside: list[dict[str, Any]],
    *,
    baseline: bool,
    write: bool,
) -> dict[str, Any]:
    """The end of ``python -m bench.<name>`` run as a script: its record (command, time, rows,
    goals, side-by-side rows), the goals printed as JSON lines and the side-by-side table, and
    with ``write`` the record in bench/results/<name>.json (``<name>-sidebyside.json`` for a
    ``baseline`` run: the plain run's figures stay as they were)."""
    result: dict[str, Any] = {
        "name": name,
        "command": " ".join([f"python -m bench.{name}", *(argv or sys.argv[1:])]),
        "time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "rows": rows,
        "goals": goals,
        "sidebyside": sidebyside,
    }
    for g in goals:
        print(json.dumps(g), flush=True)
    if sidebyside:
        print(markdown_table(sidebyside), flush=True)
    if write:
        out = name + ("-sidebyside" if baseline else "") + ".json"
        RESULTS_DIR.mkdir(parents=True, exist_ok=True)
        (RESULTS_DIR / out).write_text(json.dumps(result, indent=2) + "\n")
    return result


def load_previous(names: Sequence[str] | None = None) -> dict[str, BenchResult]:
    """Results of earlier plain runs (``names``: only those benchmarks), so a partial run
    keeps the other benchmarks' tables. Side-by-side files and files of scripts with their
    own format (engine_sessions.json) are not results of this harness and are left out."""
    out: dict[str, BenchResult] = {}
    for path in sorted(RESULTS_DIR.glob("*.json")):
        if path.stem.endswith("-sidebyside") or (names is not None and path.stem not in names):
            continue
        data = json.loads(path.read_text())
        fields = BenchResult.__dataclass_fields__
        kept = {k: v for k, v in data.items() if k in fields}
        try:
            res = BenchResult(**kept)
            res.goals = [Goal(**g) for g in data.get("goals", [])]
        except TypeError:  # another format (a script's own JSON)
            continue
        out[res.name] = res
    return out


def sidebyside_table(results: Sequence[BenchResult]) -> str:
    """Every benchmark's side-by-side rows in one table: benchmark, what, figure, new, old,
    new/old (what ``python -m bench --baseline DIR`` prints at the end)."""
    rows = [{"benchmark": r.name, **row} for r in results for row in r.sidebyside]
    return markdown_table(rows)


def update_readme(results: Sequence[BenchResult], command: str) -> None:
    """Replace the generated block of bench/README.md (or append one)."""
    block = "\n".join(
        [
            START,
            f"Machine: {machine_description()}  ",
            f"Command: `{command}`",
            "",
            "#### Goals",
            "",
            goals_table(results) or "(no goals measured)",
            "",
            *[render(r) for r in results],
            END,
        ]
    )
    text = README.read_text() if README.exists() else "# Benchmarks\n\n"
    pattern = re.compile(re.escape(START) + ".*?" + re.escape(END), re.S)
    if pattern.search(text):
        text = pattern.sub(lambda _: block, text)
    else:
        text = text.rstrip() + "\n\n## Latest results\n\n" + block + "\n"
    README.write_text(text)


def console(results: Sequence[BenchResult]) -> str:
    """The plain-text summary printed at the end of a run."""
    rows = [
        {"benchmark": r.name, "status": f"skipped: {r.skipped}" if r.skipped else "ran",
         "seconds": round(r.elapsed_s, 1)}
        for r in results
    ]  # fmt: skip
    return "\n".join(["## Summary", markdown_table(rows), "", "## Goals", goals_table(results)])
