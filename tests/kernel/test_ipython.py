"""lagent's IPython tools on real sandboxed kernels, through the executors."""

from __future__ import annotations

import asyncio

import pytest

from agents.actions import ActionExecutor, AsyncActionExecutor
from agents.actions.ipython import (
    AsyncIPythonInteractive,
    IPythonInteractive,
    IPythonInterpreter,
    extract_code,
)
from agents.sandbox import KernelPool
from agents.schema import ActionStatusCode, AgentMessage

pytestmark = pytest.mark.kernel


def call(command: str) -> AgentMessage:
    return AgentMessage(
        sender="user", content={"name": "IPythonInteractive", "parameters": {"command": command}}
    )


def test_lagent_executor_example(pool: KernelPool) -> None:
    executor = ActionExecutor(actions=[IPythonInteractive(pool=pool)])
    reply = executor(call("print(63*63.0)"))
    assert reply.sender == "ActionExecutor"
    assert reply.content.format_result() == "3969.0"
    assert reply.content.state == ActionStatusCode.SUCCESS


async def test_state_persists_per_session_and_not_across(pool: KernelPool) -> None:
    executor = AsyncActionExecutor(actions=[AsyncIPythonInteractive(pool=pool)])
    await executor(call("counter = 10"), session_id="t1:a")
    await executor(call("counter = 20"), session_id="t1:b")
    a = await executor(call("counter += 1\ncounter"), session_id="t1:a")
    b = await executor(call("counter"), session_id="t1:b")
    assert a.content.format_result() == "11"
    assert b.content.format_result() == "20"


async def test_sessions_run_concurrently(pool: KernelPool) -> None:
    executor = AsyncActionExecutor(actions=[AsyncIPythonInteractive(pool=pool)])
    code = "import time; t0 = time.time(); time.sleep(2); print(t0, time.time())"
    replies = await asyncio.gather(
        *(executor(call(code), session_id=f"t1:par{i}") for i in range(2))
    )
    (a0, a1), (b0, b1) = ([float(x) for x in r.content.format_result().split()] for r in replies)
    assert a0 < b1 and b0 < a1  # the two cells ran at the same time, not one after the other


def test_errors_carry_the_traceback_tail(pool: KernelPool) -> None:
    executor = ActionExecutor(actions=[IPythonInteractive(pool=pool)])
    reply = executor(call("print('before')\n1/0"), session_id="errors")
    result = reply.content
    assert result.state == ActionStatusCode.API_ERROR
    assert result.errmsg.splitlines()[-1] == "ZeroDivisionError: division by zero"
    assert "\x1b[" not in result.errmsg
    assert result.format_result() == "before"


def test_timeout_is_an_error_the_model_can_read(pool: KernelPool) -> None:
    executor = ActionExecutor(actions=[IPythonInteractive(timeout=1, pool=pool)])
    reply = executor(call("import time\nwhile True: time.sleep(0.01)"), session_id="slow")
    assert reply.content.state == ActionStatusCode.API_ERROR
    assert "TimeoutError" in reply.content.errmsg
    after = executor(call("print('ok')"), session_id="slow")
    assert after.content.format_result() == "ok"


def test_kernel_death_is_reported_and_the_next_cell_gets_a_fresh_kernel(pool: KernelPool) -> None:
    executor = ActionExecutor(actions=[IPythonInteractive(pool=pool)])
    executor(call("x = 1; open('survives.txt', 'w').write('yes')"), session_id="dies")
    died = executor(call("import os; os._exit(3)"), session_id="dies")
    assert died.content.state == ActionStatusCode.API_ERROR
    assert "KernelDied" in died.content.errmsg
    after = executor(call("print('x' in dir(), open('survives.txt').read())"), session_id="dies")
    assert after.content.format_result() == "False yes"


def test_matplotlib_figure_comes_back_as_an_image(pool: KernelPool) -> None:
    tool = IPythonInterpreter(pool=pool)
    executor = ActionExecutor(actions=[tool])
    code = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"
    reply = executor(
        AgentMessage(
            sender="user", content={"name": "IPythonInterpreter", "parameters": {"command": code}}
        ),
        session_id="plots",
    )
    images = [item for item in reply.content.result if item["type"] == "image"]
    assert len(images) == 1, reply.content
    import base64

    assert base64.b64decode(images[0]["data"]).startswith(b"\x89PNG")
    name = images[0]["content"].rsplit("/", 1)[-1]
    assert (pool.workdir("plots") / ".images" / name).is_file()
    assert "[image](" in reply.content.format_result()


def test_markdown_fences_are_stripped() -> None:
    assert extract_code("```python\nprint(1)\n```") == "print(1)\n"
    assert extract_code("print(2)") == "print(2)"


def test_below_the_minimum_level_code_is_refused(pool: KernelPool) -> None:
    refusing = KernelPool(pool.config)
    refusing.level = "L1"  # as if the self-test had found only uid + rlimits
    try:
        reply = ActionExecutor(actions=[IPythonInteractive(pool=refusing)])(call("print(1)"))
    finally:
        refusing.close()
    assert reply.content.state == ActionStatusCode.API_ERROR
    assert "AGENTSTATION_SANDBOX_MIN_LEVEL" in reply.content.errmsg
    assert "L1" in reply.content.errmsg
