"""Smoke tests of the benchmark harness: tiny loads against the baseline servers (no figures)."""

from __future__ import annotations

import asyncio
import json

import pytest

from bench import gateway, loadgen, persistence, proxy, report, streaming  # noqa: F401
from bench.__main__ import parse_args
from bench.common import HOST, BenchResult, Goal, gateway_server, http_json, pct, uvicorn_server
from bench.load import LoadSpec, run_aiohttp, run_load, wrk_available
from bench.responses import GATEWAY_ENV, SCRIPTED, TARGETS, _goals, _with_ratios, serves_responses
from bench.responses_chains import _session, chain, goals
from bench.sse_client import build_request, open_stream

pytestmark = [pytest.mark.slow, pytest.mark.live]
BODY = {"model": "m", "messages": [{"role": "user", "content": "hello bench"}]}


def test_echo_answers_a_chat_completion_and_the_aiohttp_generator_counts_it() -> None:
    with uvicorn_server("echo", "bench.baselines.echo:app") as echo:
        answer = http_json("POST", f"{echo.base_url}/v1/chat/completions", BODY)
        spec = LoadSpec("echo", echo.base_url, BODY, ["/v1/chat/completions"])
        result = run_aiohttp(spec, connections=2, duration_s=0.3)
        bad = run_aiohttp(LoadSpec("404", echo.base_url, BODY, ["/nope"]), 1, 0.2)
    assert answer["choices"][0]["message"]["content"] == "hello bench"
    assert answer["usage"]["completion_tokens"] == 2
    assert result.requests > 0 and result.errors == 0 and result.rps > 0
    assert 0 < result.p50_ms <= result.p99_ms
    assert bad.requests > 0 and bad.errors == bad.requests  # a fast 404 is no throughput


def test_wrk_generator_reports_requests_and_latency() -> None:
    # `make install` installs wrk (scripts/install.sh); the harness's default generator.
    assert wrk_available(), "wrk is missing: run `make install`"
    with uvicorn_server("echo", "bench.baselines.echo:app") as echo:
        spec = LoadSpec("echo", echo.base_url, BODY, ["/v1/chat/completions"])
        result = run_load("wrk", spec, connections=2, duration_s=1)
    assert result.requests > 0 and result.errors == 0
    assert 0 < result.p50_ms <= result.p99_ms


def test_forwarder_relays_the_mock_upstream() -> None:
    with uvicorn_server("mock", "bench.baselines.mock_openai:app") as mock:
        env = {"BENCH_UPSTREAM": mock.base_url}
        with uvicorn_server("fwd", "bench.baselines.forwarder:app", env=env) as fwd:
            answer = http_json("POST", f"{fwd.base_url}/v1/chat/completions", BODY)
    assert answer["object"] == "chat.completion"
    assert answer["choices"][0]["message"]["content"].startswith("hello from the mock")


def test_sse_client_times_every_event_of_a_stream() -> None:
    env = {"BENCH_CHUNK_DELAY_S": "0.01"}
    with uvicorn_server("echo", "bench.baselines.echo:app", env=env) as echo:
        body = {**BODY, "stream": True, "messages": [{"role": "user", "content": "a b c d"}]}
        request = build_request(HOST, echo.port, "/v1/chat/completions", body)
        stats = asyncio.run(open_stream(HOST, echo.port, request, 0.0))
    assert stats.status_ok and stats.done
    assert 2 <= len(stats.reads) <= 5  # 4 words + the closing event, some reads coalesced
    assert stats.reads == sorted(stats.reads)


def test_report_table_goals_and_json_round_trip() -> None:
    res = BenchResult("x", rows=[{"a": 1, "b": 2.5}], goals=[Goal("g", "≥ 1", "2", True, "+1")])
    table = report.markdown_table(res.rows)
    assert table.splitlines()[0] == "| a | b |" and "2.50" in table
    assert "| x | g | ≥ 1 | 2 | met | +1 |" in report.goals_table([res])
    assert json.loads(json.dumps(res.to_json()))["goals"][0]["met"] is True


def test_cli_options_and_percentiles() -> None:
    names, opts, readme = parse_args(["gateway", "--quick", "--generator", "aiohttp"])
    assert names == ["gateway"] and opts.quick and opts.rounds == 1 and not readme
    assert opts.generator == "aiohttp"
    assert pct([1.0, 2.0, 3.0, 4.0], 50) == 2.0 and pct([5.0], 99) == 5.0 and pct([], 50) == 0.0
    with pytest.raises(SystemExit):
        parse_args(["nope"])


def test_profile_summary_groups_py_spy_stacks_by_function() -> None:
    from bench.profile import top_functions

    raw = "main (app/cli.py:10);handler (app/api/x.py:5);dumps (json/__init__.py:231) 3\n"
    raw += "main (app/cli.py:10);handler (app/api/x.py:7) 1\n"
    text = top_functions(raw)
    assert text.startswith("4 samples")
    assert " 75.0%  dumps (json/__init__.py)" in text  # self time, line numbers merged
    assert "100.0%  handler (app/api/x.py)" in text  # inclusive, our code only


def test_responses_bench_drives_both_front_doors_and_compares_them() -> None:
    with gateway_server("gw", SCRIPTED, None, **GATEWAY_ENV) as gw:
        assert serves_responses(gw)
        runs = {
            name: run_aiohttp(LoadSpec(name, gw.base_url, body, [path], gw), 1, 0.3)
            for name, path, body in TARGETS
        }
    for name, got in runs.items():
        assert got.requests > 0 and got.errors == 0, name
    rows = [
        {"target": "chat", "rps": 1000, "p50_ms_c1": 0.5},
        {"target": "responses", "rps": 960, "p50_ms_c1": 0.6},
        {"target": "chat-stream", "rps": 800, "p50_ms_c1": 0.5},
        {"target": "responses-stream", "rps": 700, "p50_ms_c1": 0.9},
    ]
    _with_ratios(rows)
    assert rows[1]["vs_chat"] == 0.96 and rows[1]["added_p50_ms"] == 0.1
    assert [g.met for g in _goals(rows)] == [True, True, False, False]


def test_responses_chains_client_follows_a_chain_and_replays_chat_history() -> None:
    demo = [{"name": "demo", "backend": "scripted", "replies": ["one two three"]}]
    with gateway_server("gw", demo, None, AGENTSTATION_SANDBOX_ENABLED="false") as gw:

        async def both() -> tuple[list[tuple[float, int]], list[tuple[float, int]]]:
            async with _session() as http:
                chained = await chain(http, "responses", gw.base_url, "a", 3)
                chat = await chain(http, "chat", gw.base_url, "a", 3)
                return chained, chat

        chained, chat = asyncio.run(both())
    assert [n for _, n in chained] == [3, 3, 3] == [n for _, n in chat]
    assert all(t > 0 for t, _ in chained + chat)  # a first text delta was timed
    rows = [
        {"chains": 8, "turns": 4, "responses_tok_s": 96.0, "chat_tok_s": 100.0,
         "responses_ttft_p50_ms": 10.0, "anchor_tok_s": 90.0, "anchor_ttft_p50_ms": 12.0},
        {"server": "responses", "history_turns": 20, "ratio": 1.2},
    ]  # fmt: skip
    assert [(g["goal"].split(" (")[0], g["met"]) for g in goals(rows)] == [
        ("tokens/s responses / chat", True),
        ("tokens/s vs agentic-api", True),
        ("TTFT p50 vs agentic-api", True),
        ("TTFT turn 20 / turn 1", True),
    ]


async def test_engine_affinity_harness_measures_hits_and_ttft_per_policy() -> None:
    # bench/engine_affinity.py's measurement on fake engines that count prefix hits like
    # vLLM's /metrics (a message is a hit where the server saw the conversation up to it).
    from bench.engine_affinity import measure
    from tests.app.test_engine_fleet import FakeEngine

    engines = [FakeEngine(f"up{i}") for i in range(4)]
    for engine in engines:
        await engine.start()
    try:
        fleets = {"session": [e.url[:-3] for e in engines[:2]]}
        fleets["round_robin"] = [e.url[:-3] for e in engines[2:]]
        result = await measure(fleets, sessions=4, turns=5, max_tokens=4)
    finally:
        for engine in engines:
            await engine.stop()
    session, rr = result["rows"]
    assert (session["routing"], rr["routing"]) == ("session", "round_robin")
    assert sum(session["requests_per_server"]) == sum(rr["requests_per_server"]) == 20
    assert session["prefix_hit_rate"] > rr["prefix_hit_rate"] > 0
    assert session["last_turn_ttft_p50_ms"] > 0 and result["ttft_ratio_session_over_round_robin"]
    placed = session["sessions_per_server"]  # bounded loads: at most ceil(1.125 × 4 / 2) = 3
    assert sum(placed) == 4 and max(placed) <= 3
    assert all(len(result["per_turn"][p]) == 5 for p in ("session", "round_robin"))


def test_agentic_bench_runs_the_same_cells_on_both_sides() -> None:
    # bench/agentic.py on its smallest load: 2 sessions of 2 steps on each side (AgentStation's
    # tool agent on the in-process engine; the Agents SDK's loop against vLLM's own server).
    # The harness raises unless every session on both sides ran the pinned cell twice and
    # printed the expected outputs; the rows carry both sides' figures.
    from bench import agentic
    from bench.common import BenchOptions

    reason = agentic.available()
    assert reason is None, reason  # `make install` builds the SDK's venv and the kernel env
    result = agentic.run(BenchOptions(quick=True, rounds=1))
    sides = {r["side"]: r for r in result.rows}
    assert set(sides) == {"A", "B"}
    for row in sides.values():
        assert row["sessions"] == 2 and row["steps"] == 2
        assert row["post_tool_ttfts"] == 4  # 2 per session: the calls after cells 1 and 2
        assert 0 < row["post_tool_ttft_p50_ms"] < row["session_p50_ms"]
        assert 0 < row["post_tool_call_p50_ms"] < row["session_p50_ms"]
        assert row["engine_ttft_mean_ms"] > 0  # vLLM's own histogram, on both sides
        assert row["prefix_hit_rate"] is not None and 0 < row["prefix_hit_rate"] <= 1
        assert row["kernels_at_start"] == 2  # A's too: started with its sessions (PRESTART)
    # A's first sign of the next step never comes after that step's call is complete (with the
    # product's default, no argument deltas, it is the complete call: docs/engine.md).
    assert sides["A"]["post_tool_ttft_p50_ms"] <= sides["A"]["post_tool_call_p50_ms"]
    assert [g.met is not None for g in result.goals] == [True, True, True]


def test_fixed_cost_bench_counts_a_stored_turn_and_where_its_calls_go() -> None:
    import cProfile

    from bench import fixed_cost, inproc

    profile, reply = cProfile.Profile, inproc.REPLY
    got = fixed_cost.counted("responses", 1, chains=1, turns=1, top=5)
    assert got["calls"] > 500 and got["follower_wakeups"] >= 0 and got["loop_iterations"] >= 0
    names = [name for name, _ in got["inclusive"]]
    assert len(names) == 5 and all(":" in name for name in names)
    assert (cProfile.Profile, inproc.REPLY) == (profile, reply)  # put back
