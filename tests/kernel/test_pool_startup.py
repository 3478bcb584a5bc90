"""The pool's start-up is single-flight: a first cell sent while the self-test runs waits for
it (the start-up once raced itself: FileExistsError on the pool's run dir)."""

from __future__ import annotations

import asyncio
import shutil

import pytest

from agents.sandbox import KernelPool, SandboxError
from tests.kernel.conftest import make_base_dir, sandbox_config

pytestmark = pytest.mark.kernel


async def test_concurrent_first_users_share_one_start_up() -> None:
    base = make_base_dir()
    pool = KernelPool(sandbox_config(base))
    try:
        level, cell, again = await asyncio.gather(
            pool.start(), pool.execute("s", "print(6*7)"), pool.start()
        )
        assert level == again == pool.level
        assert cell.status == "ok" and cell.output.strip() == "42", cell
    finally:
        await pool.aclose()
        shutil.rmtree(base, ignore_errors=True)


async def test_a_start_up_that_takes_too_long_is_a_clear_error() -> None:
    base = make_base_dir()
    pool = KernelPool(sandbox_config(base, start_timeout_s=0.001))
    try:
        with pytest.raises(SandboxError, match="still starting"):
            await pool.execute("s", "print(1)")
    finally:
        await pool.aclose()
        shutil.rmtree(base, ignore_errors=True)
