"""bench.stateless_cpu --calls: where a profiled call comes from (package, stdlib, this tree)."""

from __future__ import annotations

import cProfile
import json
import pstats

from bench.stateless_cpu import calls_by_origin, origin


def test_origin_names_the_package_the_stdlib_module_or_the_trees_file() -> None:
    site = "/work/x/.venv/lib/python3.11/site-packages/prometheus_client/metrics.py"
    assert origin(site) == "prometheus_client"
    assert origin("/usr/lib/python3.11/asyncio/base_events.py") == "asyncio"
    assert origin("/root/.pyenv/versions/3.11.7/lib/python3.11/json/__init__.py") == "json"
    assert origin("/root/.pyenv/versions/3.11.7/lib/python3.11/contextlib.py") == "contextlib"
    assert origin("/work/wt-metrics/app/ops/metrics.py") == "app/ops/metrics.py"
    assert origin("/work/wt-metrics/agents/agent.py") == "agents/agent.py"
    assert origin("<frozen runpy>") == "<frozen runpy>"


def helper(n: int) -> int:
    return sum(len(str(i)) for i in range(n))


def test_builtin_calls_are_counted_to_their_callers() -> None:
    profile = cProfile.Profile()
    profile.enable()
    for _ in range(3):
        helper(5)
        json.dumps([1])
    profile.disable()
    rows = pstats.Stats(profile).stats  # type: ignore[attr-defined]
    by_origin = calls_by_origin(rows)
    here = origin(__file__)
    assert here.endswith("tests/bench/test_stateless_cpu_calls.py")
    # helper (3 calls) and the built-ins it calls: sum and range (3 each), len and str (15
    # each) count to this file; json's functions and its C encoder to json; none to "~".
    assert by_origin[here] >= 3 + 3 + 3 + 15 + 15
    assert by_origin["json"] >= 3
    assert "~" not in by_origin
