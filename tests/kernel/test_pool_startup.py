"""The pool's start-up is single-flight: a first cell sent while the self-test runs waits for
it (the start-up once raced itself: FileExistsError on the pool's run dir)."""

from __future__ import annotations

import asyncio
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.actions import AsyncIPythonInteractive
from agents.sandbox import KernelPool, SandboxError, selftest
from agents.sandbox.config import Level
from agents.schema import ActionStatusCode
from tests.kernel.conftest import make_base_dir, sandbox_config

pytestmark = pytest.mark.kernel


@pytest.fixture
def base() -> Iterator[Path]:
    path = make_base_dir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_concurrent_first_users_share_one_start_up(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, runs = selftest.detect, []

    async def counted(pool: KernelPool) -> Level:
        runs.append(pool)
        return await real(pool)

    monkeypatch.setattr(selftest, "detect", counted)
    pool = KernelPool(sandbox_config(base))
    try:
        level, cell, again = await asyncio.gather(
            pool.start(), pool.execute("s", "print(6*7)"), pool.start()
        )
        assert level == again == pool.level and len(runs) == 1
        assert cell.status == "ok" and cell.output.strip() == "42", cell
    finally:
        await pool.aclose()


async def test_a_tool_call_waits_for_the_start_up_at_most_start_timeout_s(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    started = asyncio.Event()  # set on the pool's loop: checked, never awaited across loops

    async def slow(pool: KernelPool) -> Level:
        started.set()
        await asyncio.sleep(1.0)  # a self-test on a loaded machine
        return "L0"

    monkeypatch.setattr(selftest, "detect", slow)
    pool = KernelPool(sandbox_config(base, start_timeout_s=0.2, min_level="L0"))
    try:
        service = asyncio.ensure_future(pool.start())
        with pytest.raises(SandboxError, match="still starting"):
            await pool.execute("s", "print(1)")
        # The service's own start-up is not cut short by the tool call's bound.
        assert await service == "L0" and pool.level == "L0" and pool.start_error is None
    finally:
        await pool.aclose()


async def test_a_failed_start_up_is_an_error_for_each_waiter_and_retried(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real, failures = selftest.detect, [OSError("no space left on device")]
    start, joined = KernelPool._start, [0]

    async def counted(pool: KernelPool, wait_s: float | None) -> Level:
        joined[0] += 1
        return await start(pool, wait_s)

    async def flaky(pool: KernelPool) -> Level:
        if failures:
            # Fails once both callers wait on this start-up (else, on a loaded machine, the
            # tool call could arrive after the failure and rightly start it again).
            for _ in range(1000):
                if joined[0] >= 2:
                    break
                await asyncio.sleep(0.01)
            raise failures.pop()
        return await real(pool)

    monkeypatch.setattr(KernelPool, "_start", counted)
    monkeypatch.setattr(selftest, "detect", flaky)
    pool = KernelPool(sandbox_config(base))
    try:
        first = await asyncio.gather(pool.start(), pool.execute("s", "1"), return_exceptions=True)
        for outcome in first:
            assert isinstance(outcome, SandboxError), outcome
            assert "failed to start: OSError" in str(outcome)
        assert pool.level is None and "no space" in (pool.start_error or "")
        # The next call starts it again (the run dir the first try made is reused).
        cell = await pool.execute("s", "print(6*7)")
        assert cell.output.strip() == "42" and pool.start_error is None and pool.level_ok
    finally:
        await pool.aclose()


async def test_below_the_minimum_level_a_tool_call_gets_an_error_saying_so(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def weak(pool: KernelPool) -> Level:
        return "L1"

    monkeypatch.setattr(selftest, "detect", weak)
    pool = KernelPool(sandbox_config(base))  # min_level L3
    try:
        result = await AsyncIPythonInteractive(pool=pool).run("print(1)")
        assert result.state == ActionStatusCode.API_ERROR and not result.result
        assert "level L1 is below the required L3" in (result.errmsg or ""), result
    finally:
        await pool.aclose()


async def test_one_failed_probe_start_does_not_lower_the_level(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A probe kernel that fails to start once (a transient failure at boot) is tried again:
    # the pool still reaches the best level here, not the next one down.
    real, calls = selftest._probe, []

    async def once_broken(pool: KernelPool, level: Level, code: str) -> dict[str, object] | None:
        calls.append(level)
        if len(calls) == 1:
            return None  # as _probe answers when its kernel did not start
        return await real(pool, level, code)

    best = selftest.candidates()[0]
    monkeypatch.setattr(selftest, "_probe", once_broken)
    pool = KernelPool(sandbox_config(base))
    try:
        assert await pool.start() == best
        assert calls[:2] == [best, best]
        cell = await pool.execute("s", "print(6*7)")
        assert cell.status == "ok" and cell.output.strip() == "42", cell
    finally:
        await pool.aclose()
