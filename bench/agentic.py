"""The agentic workload (issue 29): tool-using sessions, server-side vs a client-side loop.

A session is one user message and ``steps`` (8) steps: a model call that writes a Python cell
(a forced call of one tool), the cell run in a Jupyter kernel, its output fed back to the next
model call; after the last cell one more model call ends the session (``steps + 1`` model
calls, ``steps`` cells). Both sides run the demo model (random weights) on the same engine
settings with a KV cache small enough that 32 sessions do not all fit (``--kv-cache-mib``, 8):

- **A, AgentStation**: a ``tool_agent`` with the sandboxed IPython tool, ``max_turn`` =
  steps + 1, native tool calls; one streamed ``POST /v1/sessions/{id}/messages`` per session
  (the session created before the clock starts, and its sandboxed kernel, which the gateway
  starts with the session, up before it: ``kernels_at_start``); the loop and the kernel are
  server-side. Its sessions are deleted after the round (their kernels stop, as B's do).
- **B, a client-side loop**: the OpenAI Agents SDK (``bench/agentic_client.py`` in its own venv,
  ``.venv-agents-sdk``: it imports as ``agents``) with a function tool that runs the cell in a
  local Jupyter kernel (the sandbox's kernel environment; kernels started before the clock
  starts), against vLLM's own OpenAI server (Chat Completions, streamed).

Same cells on both sides (bench/agentic_cell.py): the tool's schema pins ``command`` to one
cell (a one-value ``enum``) and both sides force the call (named ``tool_choice``, greedy), so
structured outputs make the model write that JSON token by token, whatever its weights; the
cell bumps a counter in the kernel, so step k prints k's result. The harness checks that every
session on both sides ran exactly those cells and printed exactly the expected outputs.

Figures per side and concurrency (8, 32): session completion time (p50 and the round's wall
time), the TTFT of the model calls that follow a tool result (A: the server's ``first_at -
started_at`` of that reply, i.e. tool result stored → the first argument token, which the
session stream carries as a ``message.delta`` in state PLUGIN_START; B: the tool function's
return → the call's first streamed chunk, as the SDK sees it), the engine's own TTFT over
every call (vLLM's histogram), and the prefix-cache hit rate
(vLLM's ``vllm:prefix_cache_{hits,queries}_total``: the gateway's ``/metrics`` for the
in-process engine, vLLM's server's for B). Rounds alternate A and B.

``python -m bench agentic`` or ``python -m bench.agentic [--sessions 8 32] [--steps 8]
[--rounds 2] [--kv-cache-mib 8] [--baseline DIR] [--args-side] [--quick]``. ``--baseline DIR``:
that tree's gateway (side ``A-old``) runs in the same rounds. ``--args-side``: side ``A-args``,
this tree with the model's ``stream_call_arguments`` on, in the same rounds: a forced call's
arguments are not streamed by default (the whole call arrives at once, so A's post-tool TTFT
is the whole call's time); with them streamed, its post-tool TTFT is the first argument
token's, like B's first chunk.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import signal
import statistics
import subprocess
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import aiohttp

from bench.agentic_cell import CELL, DESCRIPTION, PARAMETERS, TOOL_NAME, expected_output
from bench.common import (
    OLD,
    ROOT,
    VENV_BIN,
    BenchOptions,
    BenchResult,
    Goal,
    ServerProcess,
    Skip,
    baseline_tree,
    compare_row,
    free_port,
    gateway_server,
    http_json,
    pct,
)
from bench.engine import ENGINE, ENGINE_ENV, START_TIMEOUT_S, vllm_server

NAME = "agentic"
STEPS = 8
SESSIONS = (8, 32)
KV_CACHE_MIB = 8  # 8,192 tokens of the demo model (1 KiB/token): 8 sessions fit, 32 do not
MAX_MODEL_LEN = 4096
MAX_TOKENS = 96  # a forced call of the cell is ~50 tokens
MESSAGE = "Run the cell, one step at a time."
AGENT_NAME = "cellrunner"
SDK_PYTHON = ROOT / ".venv-agents-sdk" / "bin" / "python"
KERNEL_PYTHON = Path(
    os.environ.get("AGENTSTATION_SANDBOX_KERNEL_ENV", "/opt/agentstation/kernel-env")
) / "bin" / "python"  # fmt: skip
SITE = ROOT / "bench" / "agentic_site"  # the tool's entry point (agentstation.tools)
GOAL_SESSION_RATIO = 0.75
GOAL_TTFT_RATIO = 0.5


def agent_spec(steps: int) -> dict[str, Any]:
    """Side A's agent: the pinned-cell tool, forced native calls, ``steps + 1`` model calls."""
    force = {"type": "function", "function": {"name": TOOL_NAME}}
    spec = {
        "kind": "tool_agent",
        "model": "demo",
        "tools": [{"name": TOOL_NAME, "config": {"timeout_s": 120}}],
        "max_turn": steps + 1,
        "output_format": {"type": "native", "tool_choice": force},
        "gen_params": {"temperature": 0, "max_new_tokens": MAX_TOKENS},
    }
    return {"name": AGENT_NAME, "spec": spec}


def engine_args(kv_mib: int) -> dict[str, Any]:
    return {
        **ENGINE,
        "max_model_len": MAX_MODEL_LEN,
        "kv_cache_memory_bytes": kv_mib * 2**20,
        "disable_log_stats": False,  # vLLM's Prometheus counters: the prefix-cache hit rate
        # xgrammar takes "no free whitespace" from the engine's config only (a request's
        # ``disable_any_whitespace`` is not read): without it the random model pads the
        # forced call with whitespace until max_tokens.
        "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
    }


FCFS = "-fcfs"  # side A with the engine's scheduling_policy fcfs (--fcfs-side)
ARGS = "-args"  # side A with the model's call arguments streamed (--args-side)


def gateway(
    model_dir: Path,
    kv_mib: int,
    tree: Path | None = None,
    fcfs: bool = False,
    stream_args: bool = False,
) -> ServerProcess:
    """Side A: ``agentstation serve`` (SQLite, sandbox on) with the demo model and the
    benchmark's tool registered through its entry point. ``stream_args``: the model entry's
    ``stream_call_arguments`` (docs/engine.md): a forced call's argument tokens reach the
    session stream as they are made, so the first one after a tool result is visible."""
    model = {
        "name": "demo",
        "backend": "vllm",
        "path": str(model_dir),
        "engine": {**engine_args(kv_mib), **({"scheduling_policy": "fcfs"} if fcfs else {})},
        **({"stream_call_arguments": True} if stream_args else {}),
    }
    name = "gateway" + ("" if tree is None else OLD) + (FCFS if fcfs else "")
    name += ARGS if stream_args else ""
    metrics_port = free_port()
    server = gateway_server(
        name,
        [model],
        None,
        tree=tree,
        BENCH_AGENTIC_METRICS_PORT=str(metrics_port),
        # One kernel per live session, as side B has: at the default 16, 32 sessions evict
        # each other's kernels between cells (their state lost, the outputs wrong).
        AGENTSTATION_SANDBOX_MAX_KERNELS=str(2 * max(SESSIONS)),
        **ENGINE_ENV,
    )
    server.metrics_url = f"http://127.0.0.1:{metrics_port}"  # type: ignore[attr-defined]
    # The tree's app and agents first, then the tool's entry point, then this tree's bench.
    path = [str(tree)] if tree is not None else []
    server.env["PYTHONPATH"] = os.pathsep.join([*path, str(SITE), str(ROOT)])
    server.ready_timeout_s = START_TIMEOUT_S
    return server


def vllm(model_dir: Path, kv_mib: int) -> ServerProcess:
    """Side B's server: vLLM's own, same engine settings, stats on (for ``/metrics``)."""
    server = vllm_server(model_dir, MAX_MODEL_LEN)
    cmd = [c for c in server.cmd if c != "--disable-log-stats"]
    cmd[cmd.index("--kv-cache-memory-bytes") + 1] = str(kv_mib * 2**20)
    config = {"backend": "xgrammar", "disable_any_whitespace": True}
    cmd += ["--structured-outputs-config", json.dumps(config)]
    # Its server refuses a named tool_choice without a parser (the call itself is made under
    # structured outputs all the same); the gateway needs none.
    # With hermes' structural tags (VLLM_ENFORCE_STRICT_TOOL_CALLING, on by default) a forced
    # call is not made under the tool's JSON schema (the demo model wrote "[23, -23]"); off,
    # the server forces it under the schema, as the gateway does.
    cmd += ["--enable-auto-tool-choice", "--tool-call-parser", "hermes"]
    server.cmd = cmd
    server.env["VLLM_ENFORCE_STRICT_TOOL_CALLING"] = "0"
    return server


COUNTERS = {
    "vllm:prefix_cache_queries_total": "queries",
    "vllm:prefix_cache_hits_total": "hits",
    "vllm:time_to_first_token_seconds_sum": "ttft_sum",
    "vllm:time_to_first_token_seconds_count": "ttft_count",
    "bench_agentic_db_statements_total": "statements",  # side A's gateway only
}


async def prefix_counters(url: str) -> dict[str, float]:
    """vLLM's prefix-cache counters and TTFT histogram totals from a server's ``/metrics``
    (zeros when it has none)."""
    got = dict.fromkeys(COUNTERS.values(), 0.0)
    async with aiohttp.ClientSession() as http, http.get(url + "/metrics") as resp:
        text = await resp.text() if resp.status == 200 else ""
    for line in text.splitlines():
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name in COUNTERS:
            got[COUNTERS[name]] += float(line.rsplit(" ", 1)[1])
    return got


def _iso(value: str) -> float:
    from datetime import datetime

    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def _text(content: Any) -> str:
    if isinstance(content, dict):
        for key in ("result", "content", "text"):
            if key in content:
                return _text(content[key])
        return json.dumps(content)
    if isinstance(content, list):
        return "\n".join(_text(c) for c in content)
    return str(content)


async def server_session(http: aiohttp.ClientSession, url: str, sid: str) -> dict[str, Any]:
    """One session on side A: its wall time, cells, outputs and post-tool TTFTs."""
    body = {"message": MESSAGE, "stream": True}
    t0 = time.perf_counter()
    messages: list[dict[str, Any]] = []
    event = ""
    async with http.post(f"{url}/v1/sessions/{sid}/messages", json=body) as resp:
        resp.raise_for_status()
        async for raw in resp.content:
            line = raw.strip()
            if line.startswith(b"event: "):
                event = line[7:].decode()
            elif line.startswith(b"data: ") and event == "message":
                messages.append(json.loads(line[6:]))
            elif line.startswith(b"data: ") and event in ("run.failed", "run.cancelled"):
                raise RuntimeError(f"session run ended with {event}: {line[6:]!r}")
    wall = time.perf_counter() - t0
    cells: list[str] = []
    outputs: list[str] = []
    post_tool: list[float] = []
    step: list[float] = []
    after_tool = False
    for m in messages:
        msg = m["message"]
        formatted = msg.get("formatted")
        if msg.get("role") == "tool" or (isinstance(formatted, dict) and "result" in formatted):
            outputs.append(_result_text(msg))
            after_tool = True
        elif (isinstance(formatted, dict) and formatted.get("tool_type")) or _call_code(msg):
            code = _call_code(msg)
            if code is not None and len(cells) < len(outputs) + 1:
                cells.append(code)
            if after_tool and m.get("first_at") and m.get("started_at"):
                post_tool.append(_iso(m["first_at"]) - _iso(m["started_at"]))
            if after_tool and m.get("at") and m.get("started_at"):
                step.append(_iso(m["at"]) - _iso(m["started_at"]))
            after_tool = False
    return {"wall_s": wall, "cells": cells[: len(outputs)], "outputs": outputs,
            "post_tool_ttft_s": post_tool, "post_tool_call_s": step,
            "messages": messages}  # fmt: skip


def _call_code(msg: dict[str, Any]) -> str | None:
    formatted = msg.get("formatted")
    if isinstance(formatted, dict):
        action = formatted.get("action")
        if isinstance(action, dict):
            params = action.get("parameters") or action.get("arguments") or {}
            if isinstance(params, str):
                try:
                    params = json.loads(params)
                except json.JSONDecodeError:
                    return params  # not the pinned call: check_same_work reports it
            if isinstance(params, dict) and "command" in params:
                return str(params["command"])
    return None


def _result_text(msg: dict[str, Any]) -> str:
    formatted = msg.get("formatted")
    if isinstance(formatted, dict) and isinstance(formatted.get("result"), list):
        return "\n".join(str(r.get("content", "")) for r in formatted["result"]).strip()
    return _text(msg.get("content")).strip()


def tree_cpu_s(pid: int | None) -> tuple[float, float]:
    """User + system CPU of a server's own process (the API side: HTTP, the agent loop,
    storage, rendering) and of it with its processes (vLLM's engine core, which polls while
    idle, so its CPU grows with wall time); sandboxed kernels left out (same cells on both
    sides)."""
    import psutil

    if pid is None:
        return 0.0, 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0.0, 0.0
    own = total = 0.0
    for proc in procs:
        with contextlib.suppress(psutil.Error):
            if proc.name() == "bwrap" or any("ipykernel" in a for a in proc.cmdline()):
                continue
            times = proc.cpu_times()
            total += times.user + times.system
            if proc.pid == pid:
                own = times.user + times.system
    return own, total


def _cpu_delta(before: tuple[float, float], after: tuple[float, float]) -> tuple[float, ...]:
    return tuple(b - a for a, b in zip(before, after, strict=True))


async def server_round(
    url: str, metrics_url: str, sessions: int, pid: int | None = None, profile: str | None = None
) -> dict[str, Any]:
    timeout = aiohttp.ClientTimeout(total=1800)
    conn = aiohttp.TCPConnector(limit=0)
    async with aiohttp.ClientSession(timeout=timeout, connector=conn) as http:
        idle0 = await idle_kernels(http, url)
        ids = []
        for _ in range(sessions):
            async with http.post(f"{url}/v1/sessions", json={"agent": AGENT_NAME}) as resp:
                resp.raise_for_status()
                ids.append(str((await resp.json())["id"]))
        up = await kernels_up(http, url, idle0 + sessions) - idle0
        before = await prefix_counters(metrics_url)
        spy = _py_spy(pid, profile)
        cpu0 = tree_cpu_s(pid)
        threads0 = thread_cpu_s(pid)
        t0 = time.perf_counter()
        try:
            got = await asyncio.gather(*(server_session(http, url, sid) for sid in ids))
        finally:
            wall = time.perf_counter() - t0
            cpu = _cpu_delta(cpu0, tree_cpu_s(pid))
            threads = _thread_delta(pid, threads0, thread_cpu_s(pid))
            if spy is not None:
                spy.send_signal(signal.SIGINT)  # py-spy writes its profile on SIGINT
                spy.wait(timeout=120)
        after = await prefix_counters(metrics_url)
        for sid in ids:  # their kernels stop (as B's do): the next round's start in free slots
            async with http.delete(f"{url}/v1/sessions/{sid}") as resp:
                resp.raise_for_status()
    return {"wall_s": wall, "sessions": got, "prefix": (before, after), "server_cpu_s": cpu,
            "thread_cpu_s": threads, "kernels_at_start": up}  # fmt: skip


async def idle_kernels(http: aiohttp.ClientSession, url: str) -> int:
    """The gateway's started, idle sandboxed kernels (its ``agentstation_kernels`` gauge)."""
    async with http.get(f"{url}/metrics") as resp:
        resp.raise_for_status()
        text = await resp.text()
    for line in text.splitlines():
        if line.startswith('agentstation_kernels{state="idle"}'):
            return int(float(line.split()[-1]))
    return 0


async def kernels_up(
    http: aiohttp.ClientSession, url: str, target: int, stall_s: float = 5.0, limit_s: float = 180
) -> int:
    """Side A's clock starts once its sessions' kernels are up, as B's are: the gateway starts
    a session's kernel when the session is created (docs/sandbox.md, ``PRESTART``); wait until
    ``target`` kernels are idle. A gateway that starts none ahead (a tree before it, or no free
    slot) stops gaining: after ``stall_s`` without a new one the round starts with those up
    (``kernels_at_start`` in the row; the others start in their first cell, on the clock)."""
    start = last_change = time.monotonic()
    seen = await idle_kernels(http, url)
    while seen < target and time.monotonic() - start < limit_s:
        await asyncio.sleep(0.1)
        now = await idle_kernels(http, url)
        if now != seen:
            seen, last_change = now, time.monotonic()
        elif time.monotonic() - last_change > stall_s:
            break
    return seen


def thread_cpu_s(pid: int | None) -> dict[int, float]:
    """User + system CPU of each thread of a server's own process (``/proc``), by thread id."""
    out: dict[int, float] = {}
    if pid is None:
        return out
    tick = os.sysconf("SC_CLK_TCK")
    with contextlib.suppress(OSError):
        for tid in os.listdir(f"/proc/{pid}/task"):
            with contextlib.suppress(OSError), open(f"/proc/{pid}/task/{tid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
                out[int(tid)] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _thread_delta(
    pid: int | None, before: dict[int, float], after: dict[int, float]
) -> dict[str, float]:
    """CPU seconds per kind of thread over a round: Python's thread names (read with
    ``py-spy dump``, as /proc shows none) with numbers dropped: ``MainThread`` (the event
    loop: HTTP, the agent loop, vLLM's output handler, storage), ``sandbox`` (the kernel
    pool's loop: kernel clients), ``ThreadPoolExecutor`` (vLLM's renderer: chat template
    and tokenization), ..."""
    names: dict[int, str] = {}
    if pid is not None and (VENV_BIN / "py-spy").exists():
        dump = subprocess.run([str(VENV_BIN / "py-spy"), "dump", "--nonblocking", "--pid",
                               str(pid)], capture_output=True, text=True, timeout=60)  # fmt: skip
        for m in re.finditer(r'^Thread (\d+) \([^)]*\): "([^"]*)"', dump.stdout, re.M):
            names[int(m.group(1))] = re.split(r"[-_]", m.group(2))[0]
    got: dict[str, float] = {}
    for tid, cpu in after.items():
        kind = names.get(tid, "other")
        got[kind] = got.get(kind, 0.0) + cpu - before.get(tid, 0.0)
    return got


def _py_spy(pid: int | None, out: str | None) -> subprocess.Popen[bytes] | None:
    """``py-spy record`` of the gateway's process for a round (``--py-spy PATH``): a
    speedscope profile (``.json``), collapsed stacks (``.txt``) or a flame graph (any other
    suffix)."""
    if out is None or pid is None:
        return None
    fmt = {".json": "speedscope", ".txt": "raw"}.get(Path(out).suffix, "flamegraph")
    # Non-blocking: pausing the process 200 times a second added its own CPU to the figure.
    cmd = [str(VENV_BIN / "py-spy"), "record", "-r", "200", "--nonblocking", "--threads",
           "--pid", str(pid), "--format", fmt, "-o", out]  # fmt: skip
    spy = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    time.sleep(1.0)  # attached before the clock starts
    return spy


def client_round(url: str, sessions: int, steps: int, pid: int | None = None) -> dict[str, Any]:
    """Side B: the SDK's loop in its own venv (a subprocess), ``sessions`` at once."""
    cfg = {
        "url": url, "model": "demo", "sessions": sessions, "steps": steps, "message": MESSAGE,
        "tool": TOOL_NAME, "description": DESCRIPTION, "parameters": PARAMETERS,
        "kernel_python": str(KERNEL_PYTHON), "max_tokens": MAX_TOKENS,
    }  # fmt: skip
    before = asyncio.run(prefix_counters(url))
    cpu0 = tree_cpu_s(pid)
    script = str(ROOT / "bench" / "agentic_client.py")
    done = subprocess.run(
        [str(SDK_PYTHON), "-I", script],
        input=json.dumps(cfg),
        capture_output=True,
        text=True,
        timeout=1800,
        cwd=tempfile.gettempdir(),
    )
    cpu = _cpu_delta(cpu0, tree_cpu_s(pid))
    after = asyncio.run(prefix_counters(url))
    line = next((x for x in done.stdout.splitlines() if x.startswith("{")), None)
    if done.returncode != 0 or line is None:
        at = done.stderr.rfind("Traceback")  # the SDK's error, not the kernels' goodbyes
        detail = done.stderr[at : at + 3000] if at >= 0 else done.stderr[-1500:]
        raise RuntimeError(f"agentic_client exited {done.returncode}: {detail}")
    got = {**json.loads(line), "prefix": (before, after), "server_cpu_s": cpu}
    return {**got, "kernels_at_start": sessions}  # started and ready before the clock


def check_same_work(side: str, got: dict[str, Any], steps: int) -> None:
    """Every session ran the pinned cell ``steps`` times and printed the expected outputs."""
    want = [expected_output(k) for k in range(1, steps + 1)]
    for i, s in enumerate(got["sessions"]):
        if s["cells"] != [CELL] * steps or s["outputs"] != want:
            detail = {"cells": s["cells"], "outputs": s["outputs"], "want": want}
            raise RuntimeError(f"side {side}, session {i}: not the pinned work: {detail}"[:2000])


def summarize(side: str, got: dict[str, Any]) -> dict[str, Any]:
    walls = [s["wall_s"] for s in got["sessions"]]
    ttfts = [t for s in got["sessions"] for t in s["post_tool_ttft_s"]]
    steps = [t for s in got["sessions"] for t in s.get("post_tool_call_s", [])]
    before, after = got["prefix"]
    delta = {k: after[k] - before[k] for k in after}
    calls = max(1, len(ttfts) + len(walls))  # a first call per session, one after each cell
    return {
        "side": side,
        "session_p50_ms": round(1000 * statistics.median(walls), 1),
        "session_max_ms": round(1000 * max(walls), 1),
        "round_wall_ms": round(1000 * got["wall_s"], 1),
        # Sessions whose kernel was up when the clock started (B: all; A: those its gateway
        # started with the session, the rest start in their first cell).
        "kernels_at_start": got.get("kernels_at_start"),
        "post_tool_ttft_p50_ms": round(1000 * pct(ttfts, 50), 1),
        "post_tool_ttft_p90_ms": round(1000 * pct(ttfts, 90), 1),
        "post_tool_ttfts": len(ttfts),
        "post_tool_call_p50_ms": round(1000 * pct(steps, 50), 1),
        "engine_ttft_mean_ms": round(1000 * delta["ttft_sum"] / delta["ttft_count"], 1)
        if delta["ttft_count"]
        else None,
        "prefix_hit_rate": round(delta["hits"] / delta["queries"], 3) if delta["queries"] else None,
        # The server's CPU per model call (the gateway or vLLM's API server; then with its
        # engine core): not kernels, not B's SDK process (the client-side loop's own CPU).
        "api_cpu_ms_per_call": round(1000 * got.get("server_cpu_s", (0.0, 0.0))[0] / calls, 2),
        "server_cpu_ms_per_call": round(1000 * got.get("server_cpu_s", (0.0, 0.0))[1] / calls, 2),
        # The gateway's database statements per model call (0 on B: vLLM's server has none).
        "db_statements_per_call": round(delta.get("statements", 0.0) / calls, 2),
        # The API process's CPU per model call by thread (A's gateway; B's vLLM API server).
        **_by_thread(got.get("thread_cpu_s", {}), calls),
    }


THREAD_KINDS = {"MainThread": "loop", "sandbox": "kernels", "ThreadPoolExecutor": "renderer"}


def _by_thread(cpu_s: dict[str, float], calls: int) -> dict[str, float]:
    """``cpu_ms_per_call_{loop,kernels,renderer,other}``: the event loop's thread, the kernel
    pool's, vLLM's renderer's (chat template, tokenization), the rest."""
    out = {f"cpu_ms_per_call_{k}": 0.0 for k in (*THREAD_KINDS.values(), "other")}
    for name, seconds in cpu_s.items():
        key = f"cpu_ms_per_call_{THREAD_KINDS.get(name, 'other')}"
        out[key] = round(out[key] + 1000 * seconds / calls, 2)
    return out


def measure(
    urls: dict[str, tuple[str, str, int | None]],
    vllm_url: str | None,
    sessions: list[int],
    steps: int,
    rounds: int,
    vllm_pid: int | None = None,
    profile: str | None = None,
) -> list[dict[str, Any]]:
    """Per concurrency, rounds alternating the gateways (A, A-old) and B (none without
    ``vllm_url``); the median round. ``profile``: py-spy's output path (a side's and the
    round's tag inserted before its suffix) for every gateway round."""
    rows = []
    for n in sessions:
        per_side: dict[str, list[dict[str, Any]]] = {}
        for i in range(rounds):
            for side, (url, metrics_url, pid) in urls.items():
                out = None
                if profile is not None:
                    path = Path(profile)
                    out = str(path.with_name(f"{path.stem}-{side}-{n}-{i}{path.suffix}"))
                got = asyncio.run(server_round(url, metrics_url, n, pid, out))
                check_same_work(side, got, steps)
                per_side.setdefault(side, []).append(summarize(side, got))
                _progress(n, per_side[side][-1])
            if vllm_url is None:
                continue
            got = client_round(vllm_url, n, steps, vllm_pid)
            check_same_work("B", got, steps)
            per_side.setdefault("B", []).append(summarize("B", got))
            _progress(n, per_side["B"][-1])
        for runs in per_side.values():
            row: dict[str, Any] = {"sessions": n, "steps": steps, "rounds": len(runs)}
            for key in runs[0]:
                values = [r[key] for r in runs]
                nums = [v for v in values if isinstance(v, int | float)]
                median = statistics.median(nums) if nums else None
                row[key] = values[0] if key == "side" else median
            rows.append(row)
        b = next((r for r in rows if r["sessions"] == n and r["side"] == "B"), None)
        if b is None:
            continue  # no side B (--no-client): no ratios
        for r in rows:
            if r["sessions"] == n and r["side"] != "B":
                r["session_vs_B"] = round(r["session_p50_ms"] / b["session_p50_ms"], 3)
                r["ttft_vs_B"] = _ratio(r["engine_ttft_mean_ms"], b["engine_ttft_mean_ms"])
                r["post_tool_call_vs_B"] = _ratio(
                    r["post_tool_call_p50_ms"], b["post_tool_call_p50_ms"]
                )
                r["post_tool_ttft_vs_B"] = _ratio(
                    r["post_tool_ttft_p50_ms"], b["post_tool_ttft_p50_ms"]
                )
    return rows


def _progress(sessions: int, summary: dict[str, Any]) -> None:
    """Each round's figures as they come (a later failure keeps them)."""
    print(json.dumps({"round": True, "sessions": sessions, **summary}), flush=True)


def _ratio(a: float | None, b: float | None) -> float | None:
    return round(a / b, 3) if a is not None and b else None


def goals(rows: list[dict[str, Any]]) -> list[Goal]:
    out = []
    for r in rows:
        if r["side"] == "A" + ARGS and r.get("post_tool_ttft_vs_B") is not None:
            p = r["post_tool_ttft_vs_B"]
            tag = f"{r['sessions']} sessions × {r['steps']} steps"
            out.append(Goal(f"post-tool TTFT p50 (tool result → first argument token) vs "
                            f"client-side loop, call arguments streamed ({tag})",
                            f"≤ {GOAL_TTFT_RATIO}×", f"{p}×", p <= GOAL_TTFT_RATIO))  # fmt: skip
        if r["side"] != "A":
            continue
        tag = f"{r['sessions']} sessions × {r['steps']} steps"
        if "session_vs_B" not in r:
            continue  # no side B (--no-client)
        s, t = r["session_vs_B"], r["ttft_vs_B"]
        out.append(Goal(f"session time vs client-side loop ({tag})", f"≤ {GOAL_SESSION_RATIO}×",
                        f"{s}×", s <= GOAL_SESSION_RATIO))  # fmt: skip
        out.append(Goal(f"TTFT (engine's, every call) vs client-side loop ({tag})",
                        f"≤ {GOAL_TTFT_RATIO}×", f"{t}×",
                        None if t is None else t <= GOAL_TTFT_RATIO))  # fmt: skip
        p = r.get("post_tool_ttft_vs_B")
        out.append(Goal(f"post-tool TTFT p50 (tool result → first token) vs client-side loop "
                        f"({tag})", f"≤ {GOAL_TTFT_RATIO}×", f"{p}×",
                        None if p is None else p <= GOAL_TTFT_RATIO))  # fmt: skip
    return out


def available() -> str | None:
    if not SDK_PYTHON.exists():
        return "no .venv-agents-sdk (bash scripts/install-clients.sh)"
    if not KERNEL_PYTHON.exists():
        return f"no kernel environment at {KERNEL_PYTHON} (bash scripts/install-kernel-env.sh)"
    return None


def run(opts: BenchOptions, sessions: list[int] | None = None, steps: int = STEPS,
        kv_mib: int = KV_CACHE_MIB, fcfs_side: bool = False, client: bool = True,
        profile: str | None = None, args_side: bool = False) -> BenchResult:  # fmt: skip
    """Through the harness: ``opts.quick`` runs 2 sessions of 2 steps, one round."""
    reason = available()
    if reason:
        raise Skip(reason)
    if opts.quick:
        sessions, steps = sessions or [2], 2
    sessions = sessions or list(SESSIONS)
    os.environ.update(ENGINE_ENV)
    from app.demo_model import build_demo_model

    result = BenchResult(NAME)
    with contextlib.ExitStack() as stack:
        model_dir = build_demo_model(Path(stack.enter_context(tempfile.TemporaryDirectory())))
        vl = stack.enter_context(vllm(model_dir, kv_mib)) if client else None
        urls: dict[str, tuple[str, str, int | None]] = {}
        sides = [
            ("A", None, False, False),
            ("A" + FCFS, None, True, False),
            ("A" + ARGS, None, False, True),
            ("A" + OLD, opts.baseline, False, False),
        ]
        for side, tree, fcfs, args in sides:
            wanted = side == "A" or tree is not None or (fcfs and fcfs_side) or (args and args_side)
            if wanted:
                gw = stack.enter_context(gateway(model_dir, kv_mib, tree, fcfs, args))
                pid = gw.proc.pid if gw.proc is not None else None
                urls[side] = (gw.base_url, gw.metrics_url, pid)  # type: ignore[attr-defined]
        for url, _, _ in urls.values():
            http_json("POST", f"{url}/v1/agents", agent_spec(steps))
        vllm_pid = vl.proc.pid if vl is not None and vl.proc is not None else None
        vllm_url = vl.base_url if vl is not None else None
        result.rows = measure(urls, vllm_url, sessions, steps, opts.rounds, vllm_pid, profile)
    result.goals = goals(result.rows)
    result.notes.append(
        f"KV cache {kv_mib} MiB on both sides; cells and outputs checked equal on both sides; "
        "A's post-tool TTFT is the server's (tool result stored → the next call's first sign "
        "on the session stream: the whole call, as argument deltas are off by default), B's "
        "the SDK's (tool return → the next call's first streamed chunk); A's engine runs the "
        "product's defaults (scheduling_policy fcfs; --fcfs-side is then the same as A); "
        "A-args (--args-side): A with the model's stream_call_arguments on, its post-tool "
        "TTFT the first argument token's"
    )
    new_rows = {x["sessions"]: x for x in result.rows if x["side"] == "A"}
    for r in result.rows:
        if r["side"] in ("A" + OLD, "A" + FCFS, "A" + ARGS):
            new = new_rows[r["sessions"]]
            figs = ("session_p50_ms", "post_tool_call_p50_ms", "session_vs_B", "ttft_vs_B",
                    "prefix_hit_rate", "api_cpu_ms_per_call", "db_statements_per_call")  # fmt: skip
            for fig in figs:
                vs = {"A" + OLD: "the baseline tree", "A" + FCFS: "A with fcfs scheduling",
                      "A" + ARGS: "A with call arguments streamed"}[r["side"]]  # fmt: skip
                what = f"{r['sessions']} sessions, A vs {vs}"
                result.sidebyside.append(compare_row(what, fig, new.get(fig), r.get(fig)))
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, nargs="+", default=list(SESSIONS))
    parser.add_argument("--steps", type=int, default=STEPS)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--kv-cache-mib", type=int, default=KV_CACHE_MIB)
    parser.add_argument("--baseline", type=Path)
    parser.add_argument("--quick", action="store_true", help="2 sessions × 2 steps, 1 round")
    parser.add_argument("--fcfs-side", action="store_true",
                        help="also side A-fcfs: this tree with scheduling_policy fcfs")  # fmt: skip
    parser.add_argument("--args-side", action="store_true",
                        help="also side A-args: stream_call_arguments on")  # fmt: skip
    parser.add_argument("--no-client", action="store_true",
                        help="the gateway sides only (no side B, no vLLM server)")  # fmt: skip
    parser.add_argument("--py-spy", metavar="PATH",
                        help="py-spy record each gateway round (.json: speedscope)")  # fmt: skip
    args = parser.parse_args(argv)
    baseline = baseline_tree(args.baseline) if args.baseline else None
    opts = replace(BenchOptions(), quick=args.quick, rounds=1 if args.quick else args.rounds,
                   baseline=baseline)  # fmt: skip
    sessions = None if args.quick else args.sessions
    res = run(opts, sessions, args.steps, args.kv_cache_mib, args.fcfs_side,
              client=not args.no_client, profile=args.py_spy, args_side=args.args_side)  # fmt: skip
    for row in res.rows:
        print(json.dumps(row), flush=True)
    for g in res.goals:
        print(g, flush=True)
    if not args.quick and not args.no_client:
        from bench import report

        report.write_json(res, "" if baseline is None else "-sidebyside")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
