"""app/runtime/eager.py: a task whose first step runs at once (a run's task, issue 25)."""

from __future__ import annotations

import asyncio
import contextvars
import inspect
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from app.runtime import eager
from app.runtime.runs import RunManager
from tests.app.conftest import make_agent, make_session

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="outside")


async def test_first_step_runs_now_as_the_task_in_its_own_context() -> None:
    seen: list[object] = []
    gate: asyncio.Future[str] = asyncio.get_running_loop().create_future()

    async def body() -> str:
        seen.append(asyncio.current_task())
        seen.append(VAR.get())
        VAR.set("inside")  # the task's own context: not the caller's
        got = await gate
        seen.append(asyncio.current_task())
        return got + VAR.get()

    VAR.set("caller")
    caller = asyncio.current_task()
    started = eager.create(body(), name="t")
    assert seen == []  # not before start()
    started.start()
    assert seen == [started.task, "caller"]
    assert asyncio.current_task() is caller  # the caller is the loop's current task again
    assert VAR.get() == "caller"
    coro = started.task.get_coro()
    assert inspect.getcoroutinestate(coro) == inspect.CORO_SUSPENDED  # type: ignore[arg-type]
    gate.set_result("done:")
    assert await started.task == "done:inside"
    assert seen[2] is started.task


async def test_a_body_that_never_waits_ends_in_its_first_step() -> None:
    ran: list[int] = []

    async def body() -> int:
        ran.append(1)
        return 7

    started = eager.create(body())
    started.start()
    assert ran == [1] and not started.task.done()  # a task ends in a loop step
    assert await started.task == 7


async def test_an_exception_of_the_first_step_is_the_task_s() -> None:
    async def body() -> None:
        raise ValueError("no")

    started = eager.create(body())
    started.start()
    with pytest.raises(ValueError, match="no"):
        await started.task


async def test_cancelled_before_its_next_step_it_is_cancelled_where_it_waits() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()
    cleaned: list[str] = []

    async def body() -> None:
        try:
            await gate
        except asyncio.CancelledError:
            cleaned.append("cancelled")
            raise

    started = eager.create(body())
    started.start()
    started.task.cancel()  # before the loop ran any of the task's steps
    with pytest.raises(asyncio.CancelledError):
        await started.task
    assert cleaned == ["cancelled"]
    assert gate.cancelled()  # what it waited on, as a waiting task's future is


async def test_cancelled_later_as_any_task() -> None:
    gate: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    async def body() -> str:
        try:
            await gate
        except asyncio.CancelledError:
            await asyncio.sleep(0)  # its cleanup may wait
            return "stopped"
        return "gate"

    started = eager.create(body())
    started.start()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    started.task.cancel()
    assert await started.task == "stopped"


async def test_without_start_it_is_an_ordinary_task() -> None:
    async def body() -> str:
        await asyncio.sleep(0)
        return asyncio.current_task().get_name()  # type: ignore[union-attr]

    started = eager.create(body(), name="plain")
    assert await started.task == "plain"


def test_started_outside_any_task() -> None:
    async def body() -> str:
        task = asyncio.current_task()
        await asyncio.sleep(0)
        assert asyncio.current_task() is task
        return "ok"

    out: list[asyncio.Task[str]] = []
    loop = asyncio.new_event_loop()
    try:

        def kick() -> None:  # a loop callback: no current task
            started = eager.create(body())
            started.start()
            assert asyncio.current_task(loop) is None
            out.append(started.task)

        loop.call_soon(kick)
        loop.run_until_complete(asyncio.sleep(0.01))
        assert loop.run_until_complete(out[0]) == "ok"
    finally:
        loop.close()


async def test_a_streamed_turn_s_run_begins_before_its_submission_returns(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The run's task has taken its first step (its body begun: the lease taken, the model
    called) when ``RunManager.submit`` returns to the request, not one loop iteration later."""
    runs: RunManager = app.state.agentstation.run_manager
    begun: list[str] = []
    submit = runs.submit

    async def submitted(sub: Any, lease: Any, inline: bool = False) -> Any:
        run, created = await submit(sub, lease, inline)
        job = runs.jobs.get(run.id)
        coro = job.task.get_coro() if job is not None and job.task is not None else None
        # Gone already (it ended in that step), or suspended in its body.
        state = inspect.CORO_CLOSED if coro is None else inspect.getcoroutinestate(coro)  # type: ignore[arg-type]
        begun.append(state)
        return run, created

    runs.submit = submitted  # type: ignore[method-assign]
    await make_agent(client)
    sid = await make_session(client)
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi", "stream": True})
    assert "run.completed" in resp.text
    assert begun and begun[0] != inspect.CORO_CREATED
