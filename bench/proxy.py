"""The gateway as an OpenAI proxy, against a minimal forwarder and LiteLLM's proxy.

All three sit in front of the same mock OpenAI upstream (bench/baselines/mock_openai.py) and
get the same request from the same generator, alternating: ``forwarder`` (FastAPI + aiohttp,
the floor for one hop), ``gateway`` (``openai`` backend, raw model) and ``litellm`` (its proxy,
from bench/.venv-litellm; skipped with a note when that venv is missing). With ``--baseline
DIR``, ``gateway-old`` (that tree's gateway) runs right after ``gateway`` in every round.
"""

from __future__ import annotations

import contextlib
import tempfile
from pathlib import Path
from typing import Any

from bench import plots
from bench.common import (
    BENCH_DIR,
    HOST,
    OLD,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    Skip,
    compare,
    free_port,
    gateway_server,
    uvicorn_server,
)
from bench.gateway import GATEWAY_ENV, num
from bench.load import LoadSpec, alternate, summarize

NAME = "proxy"
LITELLM_BIN = BENCH_DIR / ".venv-litellm" / "bin" / "litellm"
BODY = {"model": "mock", "messages": [{"role": "user", "content": "hello world"}]}
PATH = "/v1/chat/completions"
MIN_VS_FORWARDER = 1.0  # issue 29: at least as fast as one aiohttp hop

_LITELLM_CONFIG = """\
model_list:
  - model_name: mock
    litellm_params:
      model: openai/mock
      api_base: {upstream}/v1
      api_key: sk-bench
litellm_settings:
  telemetry: false
  drop_params: true
"""


def litellm_server(upstream: str) -> ServerProcess | None:
    """LiteLLM's proxy (one worker) in front of upstream, or None when not installed."""
    if not LITELLM_BIN.exists():
        return None
    config = Path(tempfile.mkdtemp(prefix="bench-litellm-")) / "config.yaml"
    config.write_text(_LITELLM_CONFIG.format(upstream=upstream))
    port = free_port()
    cmd = [str(LITELLM_BIN), "--config", str(config), "--host", HOST, "--port", str(port)]
    cmd += ["--num_workers", "1"]
    # No key, like the anonymous gateway on loopback; no cost-map download (no network here).
    env = {
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "LITELLM_LOG": "ERROR",
        "LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY": "true",
    }
    return ServerProcess(
        "litellm", cmd, port, env=env, ready_path="/health/liveliness", ready_timeout_s=180
    )


def mock_model(upstream: str) -> list[dict[str, Any]]:
    """The gateway's MODELS entry for the mock upstream."""
    return [
        {
            "name": "mock",
            "backend": "openai",
            "base_url": f"{upstream}/v1",
            "model": "mock",
            "api_key_env": "BENCH_MOCK_KEY",
        }
    ]


def _goal(ratio: float | None) -> Goal:
    name, target = "gateway as proxy vs aiohttp forwarder", f"≥ {MIN_VS_FORWARDER}×"
    if ratio is None:
        return Goal(name, target, "-", None)
    ok, margin = ratio >= MIN_VS_FORWARDER, f"{ratio - MIN_VS_FORWARDER:+.2f}×"
    return Goal(name, target, f"{ratio:.2f}×", ok, margin)


def run(opts: BenchOptions) -> BenchResult:
    """Mock upstream + three proxies; throughput at N connections, latency at one."""
    result = BenchResult(NAME)
    with contextlib.ExitStack() as stack:
        mock = stack.enter_context(uvicorn_server("mock", "bench.baselines.mock_openai:app"))
        fwd_env = {"BENCH_UPSTREAM": mock.base_url}
        fwd = stack.enter_context(
            uvicorn_server("forwarder", "bench.baselines.forwarder:app", env=fwd_env)
        )
        specs = [LoadSpec("forwarder", fwd.base_url, BODY, [PATH], fwd)]
        gw_env = {**GATEWAY_ENV, "BENCH_MOCK_KEY": "sk-bench"}
        trees = [("", None)] if opts.baseline is None else [("", None), (OLD, opts.baseline)]
        for suffix, tree in trees:
            try:
                gw = gateway_server(
                    "gw-proxy" + suffix, mock_model(mock.base_url), None, tree=tree, **gw_env
                )
                stack.enter_context(gw)
                specs.append(LoadSpec("gateway" + suffix, gw.base_url, BODY, [PATH], gw))
            except Skip as exc:
                result.notes.append(f"gateway{suffix} skipped: {exc}")
        lite = litellm_server(mock.base_url)
        if lite is None:
            result.notes.append(f"LiteLLM skipped: {LITELLM_BIN} missing (see bench/README.md).")
        else:
            try:
                stack.enter_context(lite)
                specs.append(LoadSpec("litellm", lite.base_url, BODY, [PATH], lite))
            except RuntimeError as exc:
                result.notes.append(f"LiteLLM did not start: {str(exc)[-300:]}")
        thr = alternate(specs, opts.generator, opts.connections, opts.dur(), opts.rounds)
        lat = alternate(specs, opts.generator, 1, opts.dur(2.0), opts.rounds)
    t = {k: summarize(v) for k, v in thr.items()}
    la = {k: summarize(v) for k, v in lat.items()}
    base = t["forwarder"].rps
    for spec in specs:
        name = spec.name
        result.rows.append(
            {
                "target": name,
                "rps": round(t[name].rps, 1),
                "vs_forwarder": round(t[name].rps / base, 3),
                "cpu_us_per_req": num(t[name].server_us_per_req, 0),
                "p50_ms_c1": round(la[name].p50_ms, 3),
                "p99_ms_c1": round(la[name].p99_ms, 3),
                f"p50_ms_c{opts.connections}": round(t[name].p50_ms, 2),
                f"p99_ms_c{opts.connections}": round(t[name].p99_ms, 2),
                "errors": t[name].errors + la[name].errors,
            }
        )
    result.goals.append(_goal(t["gateway"].rps / base if "gateway" in t else None))
    compared = ["vs_forwarder", "rps", "cpu_us_per_req", "p50_ms_c1"]
    result.sidebyside = compare(result.rows, "target", compared)
    if "litellm" in t and "gateway" in t:
        result.notes.append(
            f"gateway / LiteLLM throughput: {t['gateway'].rps / t['litellm'].rps:.1f}×"
        )
    if any(r["errors"] for r in result.rows):
        result.notes.append("Some targets answered non-2xx (errors column): figures are suspect.")
    if not opts.quick and opts.baseline is None:  # a side-by-side run keeps the plain plots
        names = [r["target"] for r in result.rows]
        result.plots.append(
            plots.bars("proxy-rps", names, [r["rps"] for r in result.rows],
                       f"OpenAI proxy throughput at {opts.connections} connections", "requests/s")
        )  # fmt: skip
    return result
