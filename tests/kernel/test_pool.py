"""Pool lifecycle on real kernels: shutdown, idle reaping, limits, SIGKILLed service, config."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from agents.sandbox import KernelPool, SandboxConfig, SandboxError
from tests.kernel.conftest import make_base_dir, sandbox_config

pytestmark = pytest.mark.kernel


def sandbox_processes(marker: str) -> list[psutil.Process]:
    """Processes whose command line mentions ``marker`` (a pool's run dir)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(marker in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


@pytest.fixture
def small_pool() -> Iterator[KernelPool]:
    """A second pool with one kernel slot and a short idle timeout."""
    base = make_base_dir()
    pool = KernelPool(sandbox_config(base, max_kernels=1, idle_timeout_s=1.0, queue_timeout_s=1))
    pool.start_sync()
    yield pool
    pool.close()
    assert sandbox_processes(str(base)) == []


async def test_shutdown_session_stops_its_kernels_and_can_drop_files(pool: KernelPool) -> None:
    await pool.execute("bye", "open('f.txt', 'w').write('x')", agent="a")
    await pool.execute("bye", "y = 2", agent="b")
    kernels = [k for key, k in pool.kernels.items() if key[0] == "bye"]
    assert len(kernels) == 2
    await pool.shutdown_session("bye")
    assert all(not k.alive for k in kernels)
    assert (pool.workdir("bye") / "f.txt").exists()  # reset keeps files
    await pool.shutdown_session("bye", remove_files=True)
    assert not pool.workdir("bye").exists()  # delete drops them


async def test_idle_kernels_are_reaped(small_pool: KernelPool) -> None:
    await small_pool.execute("idle", "1")
    kernel = small_pool.kernels[("idle", "default")]
    for _ in range(40):
        if not kernel.alive:
            break
        await asyncio.sleep(0.1)
    assert not kernel.alive
    assert small_pool.kernels == {}


async def test_max_kernels_evicts_idle_and_refuses_when_all_busy(small_pool: KernelPool) -> None:
    await small_pool.execute("first", "a = 1")
    await small_pool.execute("second", "b = 2")  # evicts the idle first kernel
    assert list(small_pool.kernels) == [("second", "default")]
    busy = asyncio.ensure_future(small_pool.execute("second", "import time; time.sleep(2.5)"))
    await asyncio.sleep(0.5)
    with pytest.raises(SandboxError, match="busy"):
        await small_pool.execute("third", "1")
    await busy


async def test_cancelling_a_call_interrupts_the_cell(pool: KernelPool) -> None:
    await pool.execute("cancel", "kept = 'yes'")
    task = asyncio.ensure_future(pool.execute("cancel", "import time; time.sleep(60)"))
    await asyncio.sleep(1.0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    started = time.monotonic()
    after = await pool.execute("cancel", "print(kept)")
    assert after.output == "yes\n"
    assert time.monotonic() - started < 2  # the sleep was interrupted, not waited out


SERVICE = """
import sys
from pathlib import Path
from agents.sandbox import KernelPool
from tests.kernel.conftest import sandbox_config
pool = KernelPool(sandbox_config(Path(sys.argv[1])))
cell = pool.execute_sync("victim", "import subprocess; subprocess.Popen(['sleep', '300']); 1")
print(pool.run_root / pool.pool_id, flush=True)
sys.stdin.read()
"""


def test_nothing_survives_a_sigkilled_service_and_leftovers_are_reaped() -> None:
    base = make_base_dir()
    service = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(SERVICE), str(base)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=Path(__file__).parents[2],
    )  # fmt: skip
    assert service.stdout is not None
    run_dir = service.stdout.readline().decode().strip()
    assert run_dir and sandbox_processes(run_dir), "the service did not start its kernel"
    service.send_signal(signal.SIGKILL)
    service.communicate()
    deadline = time.monotonic() + 5
    while sandbox_processes(run_dir) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert sandbox_processes(run_dir) == []
    assert [p for p in psutil.process_iter(["cmdline"]) if p.info["cmdline"] == ["sleep", "300"]
            and p.uids().real >= SandboxConfig().uid_base] == []  # fmt: skip
    assert Path(run_dir).exists()  # left behind by the killed service ...
    restarted = KernelPool(sandbox_config(base))
    restarted.start_sync()
    restarted.close()
    assert not Path(run_dir).exists()  # ... and reaped by the next one


def test_config_from_environment() -> None:
    env = {
        "AGENTSTATION_SANDBOX_MIN_LEVEL": "l1",
        "AGENTSTATION_SANDBOX_TIMEOUT_S": "12.5",
        "AGENTSTATION_SANDBOX_MEMORY_BYTES": str(512 << 20),
        "AGENTSTATION_SANDBOX_BASE_DIR": "/srv/sbx",
        "AGENTSTATION_SANDBOX_MAX_KERNELS": "",
    }
    config = SandboxConfig.from_env(env)
    assert config.min_level == "L1"
    assert config.timeout_s == 12.5
    assert config.memory_bytes == 512 << 20
    assert config.base_dir == Path("/srv/sbx")
    assert config.max_kernels == SandboxConfig().max_kernels
    with pytest.raises(ValueError, match="AGENTSTATION_SANDBOX_MIN_LEVEL"):
        SandboxConfig.from_env({"AGENTSTATION_SANDBOX_MIN_LEVEL": "L2"})


def test_pool_refuses_after_close() -> None:
    pool = KernelPool(SandboxConfig(base_dir=make_base_dir()))
    pool.close()
    with pytest.raises(SandboxError, match="closed"):
        pool.execute_sync("s", "1")


def test_without_bubblewrap_the_self_test_finds_l1(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("agents.sandbox.selftest.bwrap_path", lambda: None)
    base = make_base_dir()
    secret = base / "root-only.txt"
    secret.write_text("secret")
    secret.chmod(0o600)
    strict = KernelPool(sandbox_config(base))
    lenient = KernelPool(sandbox_config(base, min_level="L1"))
    try:
        assert strict.start_sync() == "L1"
        with pytest.raises(SandboxError, match="below the required L3"):
            strict.execute_sync("s", "1")
        assert lenient.start_sync() == "L1"
        cell = lenient.execute_sync("s", f"import os; print(os.getuid()); open({str(secret)!r})")
        assert int(cell.output) >= lenient.config.uid_base  # an unprivileged uid of its own
        assert cell.ename == "PermissionError"
    finally:
        strict.close()
        lenient.close()
