"""Side B of bench/agentic.py: the same agent as a client-side loop, the OpenAI Agents SDK.

Run by the benchmark as ``.venv-agents-sdk/bin/python -I bench/agentic_client.py`` (the SDK
imports as ``agents``, like this project's library, so it has a venv of its own and this
script imports nothing from the project). Reads its configuration as JSON on stdin:
``{"url", "model", "sessions", "steps", "cell", "tool", "description", "parameters",
"kernel_python", "max_tokens"}``; runs ``sessions`` sessions at once, each an SDK ``Runner``
with one function tool that runs the cell in a local Jupyter kernel of its own (started before
the clock starts), against vLLM's OpenAI server (Chat Completions, streamed); prints one JSON
line: per session its wall time, its cells and their outputs, and the TTFT of every model
call that follows a tool result (tool's return to the call's first streamed chunk).
"""

# ruff: noqa: I001  (``agents`` here is the SDK, a third-party package, not this project's)
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from typing import Any, BinaryIO

from agents import (  # the OpenAI Agents SDK (this venv's), not the project's library
    Agent,
    FunctionTool,
    ModelSettings,
    OpenAIChatCompletionsModel,
    RunConfig,
    Runner,
    set_tracing_disabled,
)
from agents.agent import ToolsToFinalOutputResult
from jupyter_client.manager import AsyncKernelManager
from openai import AsyncOpenAI


def kernelspec(python: str) -> None:
    """A kernelspec ``benchcell`` running ``python -m ipykernel_launcher`` (the sandbox's
    kernel environment, so both sides run the cell on the same Python)."""
    root = tempfile.mkdtemp(prefix="agentic-kernels-")
    spec_dir = os.path.join(root, "kernels", "benchcell")
    os.makedirs(spec_dir)
    # No shared ~/.ipython history database (32 kernels writing one SQLite file collide).
    argv = [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    argv += ["--HistoryManager.enabled=False"]
    with open(os.path.join(spec_dir, "kernel.json"), "w") as f:
        json.dump({"argv": argv, "display_name": "bench", "language": "python"}, f)
    os.environ["JUPYTER_PATH"] = root


async def run_cell(kc: Any, code: str) -> str:
    out: list[str] = []

    def hook(msg: dict[str, Any]) -> None:
        kind, content = msg["msg_type"], msg["content"]
        if kind == "stream":
            out.append(content["text"])
        elif kind == "execute_result":
            out.append(content["data"].get("text/plain", ""))
        elif kind == "error":
            out.append(f"{content['ename']}: {content['evalue']}")

    await kc.execute_interactive(code, output_hook=hook, timeout=120)
    return "".join(out).strip()


def _new_file(path: str) -> BinaryIO:
    return open(path, "wb")  # closed by the caller once the kernel has it


def _tail(path: str, size: int = 2000) -> str:
    with open(path, errors="replace") as f:
        return f.read()[-size:]


async def start_kernel(index: int, logs: str, tries: int = 3) -> tuple[Any, Any]:
    """One local kernel that answered ``kernel_info``, and its client. Each kernel's output
    goes to a file of its own (not this process's stderr); a kernel that dies or stays silent
    is reported on stderr (its exit code, the end of its output: why, for the record) and
    replaced by a fresh one, up to ``tries`` kernels."""
    for attempt in range(1, tries + 1):
        km = AsyncKernelManager(kernel_name="benchcell")
        path = os.path.join(logs, f"kernel-{index}-{attempt}.log")
        log = _new_file(path)
        try:
            await km.start_kernel(stdout=log, stderr=log)
        finally:
            log.close()  # the kernel holds its own copy of the descriptor
        kc = km.client()
        kc.start_channels()
        try:
            await kc.wait_for_ready(timeout=120)
            return km, kc
        except RuntimeError as exc:
            process = getattr(km.provisioner, "process", None)
            code = process.poll() if process is not None else None
            print(f"kernel {index}, try {attempt}: {exc} (exit code {code}); its output:\n"
                  f"{_tail(path)}", file=sys.stderr, flush=True)  # fmt: skip
            kc.stop_channels()
            await km.shutdown_kernel(now=True)
    raise RuntimeError(f"kernel {index}: {tries} kernels in a row failed to start (see above)")


async def session(cfg: dict[str, Any], client: AsyncOpenAI, kc: Any, start: asyncio.Event) -> Any:
    steps = int(cfg["steps"])
    cells: list[str] = []
    outputs: list[str] = []
    tool_ends: list[float] = []
    call_starts: list[float] = []  # when each forced call reached the tool (the call complete)
    firsts: list[float] = []

    calls = [0]

    async def invoke(ctx: Any, arguments: str) -> str:
        calls[0] += 1
        call_starts.append(time.perf_counter())
        if calls[0] > steps:  # the last model call's forced call: the session is over
            return ""
        code = json.loads(arguments)["command"]
        cells.append(code)
        outputs.append(await run_cell(kc, code))
        tool_ends.append(time.perf_counter())
        return outputs[-1]

    tool = FunctionTool(
        name=cfg["tool"],
        description=cfg["description"],
        params_json_schema=cfg["parameters"],
        on_invoke_tool=invoke,
        strict_json_schema=False,
    )

    async def stop_after(ctx: Any, results: Any) -> ToolsToFinalOutputResult:
        return ToolsToFinalOutputResult(is_final_output=calls[0] > steps, final_output="done")

    model = OpenAIChatCompletionsModel(model=cfg["model"], openai_client=client)
    settings = ModelSettings(tool_choice=cfg["tool"], temperature=0, max_tokens=cfg["max_tokens"])
    agent = Agent(
        name="coder",
        model=model,
        tools=[tool],
        model_settings=settings,
        reset_tool_choice=False,
        tool_use_behavior=stop_after,
    )
    await start.wait()
    t0 = time.perf_counter()
    result = Runner.run_streamed(
        agent, cfg["message"], max_turns=steps + 2, run_config=RunConfig(tracing_disabled=True)
    )
    async for event in result.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.created":
            firsts.append(time.perf_counter())  # the call's first streamed chunk
    wall = time.perf_counter() - t0
    # Model call k+1 (k ≥ 1) follows tool result k.
    post_tool = [firsts[k + 1] - tool_ends[k] for k in range(len(tool_ends)) if k + 1 < len(firsts)]
    # Tool result k → call k+1 complete (its arguments parsed, the tool invoked again).
    step = [call_starts[k + 1] - tool_ends[k] for k in range(len(tool_ends))
            if k + 1 < len(call_starts)]  # fmt: skip
    return {"wall_s": wall, "cells": cells, "outputs": outputs, "post_tool_ttft_s": post_tool,
            "post_tool_call_s": step, "model_calls": len(firsts)}  # fmt: skip


async def main() -> None:
    cfg = json.load(sys.stdin)
    set_tracing_disabled(True)
    kernelspec(cfg["kernel_python"])
    client = AsyncOpenAI(base_url=cfg["url"] + "/v1", api_key="bench", max_retries=0, timeout=600)
    logs = tempfile.mkdtemp(prefix="agentic-kernel-logs-")
    # One at a time (not timed): at 32 sessions a concurrent start left a kernel dead before
    # kernel_info twice (2026-11-27, load 12 and the quiet sitting; not reproduced alone, 3 × 32
    # concurrent starts at load 12 on 2026-11-29, cause not established), and 32 concurrent
    # waits once blocked the loop for good in a synchronous zmq send inside jupyter_client's
    # wait_for_ready (py-spy), where its timeout cannot fire.
    kernels = [await start_kernel(i, logs) for i in range(cfg["sessions"])]
    managers = [km for km, _ in kernels]
    clients = [kc for _, kc in kernels]
    start = asyncio.Event()
    tasks = [asyncio.create_task(session(cfg, client, kc, start)) for kc in clients]
    await asyncio.sleep(0.2)
    t0 = time.perf_counter()
    start.set()
    try:
        sessions = await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
    finally:
        for kc in clients:
            kc.stop_channels()
        await asyncio.gather(*(km.shutdown_kernel(now=True) for km in managers))
    print(json.dumps({"wall_s": wall, "sessions": sessions}), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
