"""The engine's start does what vLLM would otherwise do inside the first request: importing its
structured-output backends (on the event loop, a stall of every session at the first forced
tool call after a start)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.vllm.conftest import ENGINE_ARGS

SCRIPT = """
import asyncio, json, sys
from agents.llms.vllm_engine import VllmEngine

WATCHED = ("vllm.v1.structured_output.backend_lm_format_enforcer",
           "vllm.v1.structured_output.backend_xgrammar",
           "vllm.v1.structured_output.backend_guidance")

async def main():
    engine = VllmEngine(sys.argv[1], json.loads(sys.argv[2]))
    before = [m for m in WATCHED if m in sys.modules]
    await engine.start()
    after = [m for m in WATCHED if m in sys.modules]
    await engine.close()
    print(json.dumps({"before": before, "after": after}))

asyncio.run(main())
"""


def test_a_started_engine_has_imported_its_structured_output_backends(
    demo_model_path: Path,
) -> None:
    root = Path(__file__).resolve().parents[2]
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(demo_model_path), json.dumps(ENGINE_ARGS)],
        capture_output=True,
        text=True,
        timeout=600,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    line = [x for x in done.stdout.splitlines() if x.startswith("{")][-1]
    got = json.loads(line)
    assert got["before"] == []  # a fresh process: vLLM imports them lazily
    assert len(got["after"]) == 3  # done at the start, not in the first request
