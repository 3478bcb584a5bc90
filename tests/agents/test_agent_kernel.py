"""The tool agent on real sandboxed IPython kernels (the README's Coder, for real)."""

from __future__ import annotations

import shutil
from collections.abc import AsyncIterator

import pytest

from agents import AgentStatusCode, AsyncToolAgent
from agents.actions.ipython import AsyncIPythonInteractive
from agents.parsers import ToolParser
from agents.sandbox import KernelPool
from agents.testing import ScriptedLLM
from tests.kernel.conftest import make_base_dir, sandbox_config

pytestmark = pytest.mark.kernel


@pytest.fixture
async def pool() -> AsyncIterator[KernelPool]:
    base = make_base_dir()
    kernel_pool = KernelPool(sandbox_config(base, max_kernels=2))
    await kernel_pool.start()
    yield kernel_pool
    await kernel_pool.aclose()
    shutil.rmtree(base, ignore_errors=True)


async def test_tool_agent_runs_code_in_each_sessions_own_kernel(pool: KernelPool) -> None:
    script = [
        "I'll compute it.\n```python\nx = 63\nprint(x * 63.0)\n```\n",
        "The product is 3969.0.",
        "Checking my variable.\n```python\nprint(x)\n```\n",
        "x is not defined here.",
    ]
    agent = AsyncToolAgent(
        ScriptedLLM(script, stop_words=["\n```\n"]),
        "Solve the problem step by step with Python.",
        executor=[AsyncIPythonInteractive(pool=pool, timeout=20)],
        output_format=ToolParser("code interpreter", begin="```python\n", end="\n```\n"),
    )
    chunks = [c async for c in agent.stream("What is 63 * 63.0?", session_id="t:a")]
    results = [c for c in chunks if c.stream_state == AgentStatusCode.CODE_RETURN]
    assert [r.content for r in results] == ["3969.0"]
    assert chunks[-1].content == "The product is 3969.0."
    # Another session has its own kernel: x does not exist there.
    other = [c async for c in agent.stream("Is x set?", session_id="t:b")]
    error = next(c for c in other if c.stream_state == AgentStatusCode.CODE_RETURN)
    assert "NameError" in error.content
    assert error.formatted["state"] != 0
