"""Every zmq socket a kernel client opens is closed on every path: a cell, an over-size
message (IOPub reconnect), a hard restart, eviction, idle reaping, a session shutdown, a
failed start and the pool's close. (A leaked monitor PAIR socket once surfaced as a
ResourceWarning in an unrelated test.)"""

from __future__ import annotations

import asyncio
import gc
import shutil

import pytest
import zmq

from agents.sandbox import KernelPool
from agents.sandbox.channels import KernelChannels
from tests.kernel.conftest import make_base_dir, sandbox_config

pytestmark = pytest.mark.kernel
MiB = 1 << 20


def open_sockets() -> list[zmq.Socket[bytes]]:
    gc.collect()
    return [
        s
        for s in gc.get_objects()
        # type(), not isinstance: isinstance asks every object for __class__, and a deprecated
        # object of torch (imported by vLLM) answers that with a FutureWarning.
        if issubclass(type(s), zmq.Socket) and not s.closed and not getattr(s, "_shadow", False)
    ]


async def test_no_socket_outlives_its_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    before = {id(s) for s in open_sockets()}
    base = make_base_dir()
    pool = KernelPool(
        sandbox_config(
            base, max_kernels=1, idle_timeout_s=1.0, timeout_s=2.0, interrupt_grace_s=0.5,
            output_bytes=64 * 1024,
        )
    )  # fmt: skip
    try:
        await pool.start()
        assert (await pool.execute("a", "print(1)")).status == "ok"
        # Over-size output: IOPub drops the message and the client reconnects it.
        bypass = (
            "import sys; type(sys.stdout).write(sys.stdout, 'y' * 8_000_000); sys.stdout.flush()"
        )
        big = await pool.execute("a", bypass)
        assert big.status in ("ok", "error"), big
        # A cell that ignores interrupts: the sandbox is hard-restarted.
        stuck = await pool.execute(
            "a",
            "import signal, time\n"
            "signal.signal(signal.SIGINT, signal.SIG_IGN)\n"
            "while True: time.sleep(0.1)",
        )
        assert stuck.status in ("timeout", "died", "error"), stuck
        assert (await pool.execute("a", "print(2)")).output.strip() == "2"
        # Eviction: one slot, another session takes it.
        assert (await pool.execute("b", "print(3)")).output.strip() == "3"
        # Idle reaping.
        for _ in range(60):
            if not pool.kernels:
                break
            await asyncio.sleep(0.1)
        assert not pool.kernels
        assert (await pool.execute("c", "print(4)")).output.strip() == "4"
        await pool.shutdown_session("c")

        # A start that fails after the client's sockets were opened.
        async def never_ready(self: KernelChannels, alive: object, timeout_s: float) -> None:
            raise RuntimeError("kernel never answered")

        monkeypatch.setattr(KernelChannels, "wait_ready", never_ready)
        with pytest.raises(RuntimeError):
            await pool.execute("d", "print(5)")
        monkeypatch.undo()

        # A client whose set-up fails after its sockets were opened (e.g. EMFILE from zmq).
        def no_monitor(self: KernelChannels) -> None:
            raise zmq.ZMQError(24, "Too many open files")

        monkeypatch.setattr(KernelChannels, "_watch_iopub", no_monitor)
        with pytest.raises(zmq.ZMQError):
            await pool.execute("e", "print(6)")
    finally:
        await pool.aclose()
        shutil.rmtree(base, ignore_errors=True)
    leaked = [s for s in open_sockets() if id(s) not in before]
    assert leaked == [], [repr(s) for s in leaked]
