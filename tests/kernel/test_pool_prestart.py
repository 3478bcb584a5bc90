"""KernelPool.prestart: a session's kernel started ahead of its first cell, into a free slot
only; the first cell uses it (one start, and it is still that kernel's first cell)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from agents.sandbox import KernelPool, SandboxConfig
from tests.kernel.conftest import make_base_dir, sandbox_config

pytestmark = pytest.mark.kernel


PoolFactory = Callable[..., Awaitable[KernelPool]]


@pytest.fixture
async def new_pool() -> AsyncIterator[PoolFactory]:
    """Private started pools of the given sandbox settings, closed (and their dirs removed)
    after the test."""
    made: list[tuple[KernelPool, Any]] = []

    async def make(**settings: Any) -> KernelPool:
        base = make_base_dir()
        pool = KernelPool(sandbox_config(base, **settings))
        made.append((pool, base))
        await pool.start()
        return pool

    yield make
    for pool, base in made:
        await pool.aclose()
        shutil.rmtree(base, ignore_errors=True)


@pytest.fixture
async def one_slot(new_pool: PoolFactory) -> KernelPool:
    return await new_pool(max_kernels=1, queue_timeout_s=1)


async def test_a_cell_sent_during_a_prestart_uses_that_kernel(one_slot: KernelPool) -> None:
    started = one_slot.prestart("s", agent="a")
    assert started is not None
    cell = await one_slot.execute("s", "print(6*7)", agent="a")  # waits for the start
    assert await asyncio.wrap_future(started) is True
    assert cell.status == "ok" and cell.output.strip() == "42", cell
    # The prestarted kernel ran it, and it was that kernel's first cell (restarts are told
    # from "fresh": app/runtime/kernels.py).
    assert cell.kernel == one_slot.kernels[("s", "a")].name and cell.fresh
    again = await one_slot.execute("s", "print(1)", agent="a")
    assert again.kernel == cell.kernel and not again.fresh
    assert await asyncio.wrap_future(one_slot.prestart("s", agent="a")) is False  # it is up


async def test_a_prestart_never_evicts_a_kernel(one_slot: KernelPool) -> None:
    await one_slot.execute("busy", "x = 1")
    kernel = one_slot.kernels[("busy", "default")]
    started = one_slot.prestart("new")
    assert started is not None and await asyncio.wrap_future(started) is False
    assert list(one_slot.kernels) == [("busy", "default")] and kernel.alive
    # The new session still gets a kernel when it runs code (lazily, evicting the idle one).
    cell = await one_slot.execute("new", "print(2)")
    assert cell.status == "ok" and cell.fresh and not kernel.alive


def test_the_prestart_setting() -> None:
    assert SandboxConfig().prestart is True
    for off in ("0", "false", "Off", "no"):
        config = SandboxConfig.from_env({"AGENTSTATION_SANDBOX_PRESTART": off})
        assert config.prestart is False
    with pytest.raises(ValueError, match="AGENTSTATION_SANDBOX_PRESTART"):
        SandboxConfig.from_env({"AGENTSTATION_SANDBOX_PRESTART": "maybe"})


async def test_a_pool_with_prestart_off_starts_nothing_ahead(new_pool: PoolFactory) -> None:
    pool = await new_pool(prestart=False)
    assert pool.prestart("s") is None
    await pool.start()  # after anything already sent to the pool's loop
    assert pool.kernels == {}


async def test_a_prestart_never_takes_the_slot_a_waiting_cell_needs(new_pool: PoolFactory) -> None:
    pool = await new_pool(max_kernels=1, queue_timeout_s=20)
    await pool.execute("busy", "x = 1")
    running = asyncio.ensure_future(pool.execute("busy", "import time; time.sleep(10)"))
    waiting = asyncio.ensure_future(pool.execute("waiter", "print(3)"))
    for _ in range(100):  # the waiter's cell waits for the one slot
        if pool._room_waiters:
            break
        await asyncio.sleep(0.05)
    assert pool._room_waiters == 1
    # The slot frees (the busy session is stopped) while a new session's prestart comes.
    stopping = asyncio.ensure_future(pool.shutdown_session("busy"))
    await asyncio.sleep(0)
    started = pool.prestart("new")
    assert started is not None and await asyncio.wrap_future(started) is False
    await stopping
    cell = await asyncio.wait_for(waiting, 10)  # not after its whole queue timeout
    assert cell.status == "ok" and cell.output.strip() == "3"
    assert list(pool.kernels) == [("waiter", "default")]
    await asyncio.gather(running, return_exceptions=True)  # its kernel was stopped


async def test_a_full_pool_evicts_a_kernel_started_ahead_before_one_with_state(
    new_pool: PoolFactory,
) -> None:
    pool = await new_pool(max_kernels=2, queue_timeout_s=5)
    await pool.execute("old", "x = 41")  # a session's state, least recently used
    started = pool.prestart("new")  # never ran a cell: holds nothing
    assert started is not None and await asyncio.wrap_future(started) is True
    cell = await pool.execute("third", "print(1)")  # the pool is full: one must go
    assert cell.status == "ok"
    assert set(pool.kernels) == {("old", "default"), ("third", "default")}
    kept = await pool.execute("old", "print(x + 1)")
    assert kept.output.strip() == "42" and not kept.fresh
