"""One sandboxed IPython kernel: spawn, execute with limits, interrupt, kill."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient
from jupyter_client.connect import write_connection_file

from agents.sandbox import cgroups
from agents.sandbox.channels import KernelChannels, KernelStartError
from agents.sandbox.config import Level, SandboxConfig
from agents.sandbox.launcher import LaunchSpec, spawn, write_startup
from agents.sandbox.output import CellResult, OutputCollector

log = logging.getLogger("agents.sandbox")
_IDLE_GRACE_S = 5.0  # how long the output of a cell may lag its reply
_POLL_MS = 200  # how often a waiting cell checks that the kernel process is still alive


class SandboxKernel:
    """A kernel process in its sandbox and the client connected to it."""

    def __init__(
        self,
        config: SandboxConfig,
        level: Level,
        *,
        name: str,
        run_dir: Path,
        workdir: Path,
        uid: int | None,
    ) -> None:
        self.config = config
        self.level = level
        self.name = name
        self.run_dir = run_dir
        self.workdir = workdir
        self.uid = uid
        self.proc: subprocess.Popen[bytes] | None = None
        self.cgroup: cgroups.KernelCgroup | None = None
        self.channels: KernelChannels | None = None
        self.last_used = time.monotonic()
        self.busy = False
        self.started_at = 0.0

    @property
    def client(self) -> AsyncKernelClient | None:
        """The connected jupyter_client (None before start and after kill)."""
        return self.channels.client if self.channels is not None else None

    @property
    def alive(self) -> bool:
        """Whether the kernel process is still running."""
        return self.proc is not None and self.proc.poll() is None

    async def start(self, marker: str) -> None:
        """Spawn the kernel and wait until it answers ``kernel_info``."""
        t0 = time.monotonic()
        self.run_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        conn = self.run_dir / "kernel.json"
        # ipc sockets live in the run dir, bound at the same path inside the sandbox.
        key = secrets.token_hex(16).encode()
        write_connection_file(str(conn), transport="ipc", ip=str(self.run_dir / "k"), key=key)
        write_startup(self.config, self.run_dir)
        if self.uid is not None:
            # The connection file is written readable only by its creator: hand it over.
            for path in (self.run_dir, conn):
                os.chown(path, self.uid, self.uid)
        self.cgroup = cgroups.create(self.name, self.config.memory_bytes, self.config.max_procs)
        spec = LaunchSpec(
            level=self.level,
            uid=self.uid,
            workdir=self.workdir,
            run_dir=self.run_dir,
            connection_file=conn,
            cgroup_procs=self.cgroup.procs_files if self.cgroup else (),
        )
        self.proc = spawn(self.config, spec, marker)
        self._close_client()  # a restarted kernel: never two clients' sockets
        try:
            self.channels = KernelChannels(conn, self.config.max_message_bytes)
        except BaseException:
            self.kill()
            raise
        try:
            await self.channels.wait_ready(lambda: self.alive, self.config.start_timeout_s)
        except KernelStartError as exc:
            detail = self._log_tail()
            self.kill()
            raise KernelStartError(f"{exc}: {detail}" if detail else str(exc)) from None
        except BaseException:
            self.kill()
            raise
        self.started_at = time.monotonic() - t0
        log.debug("kernel %s ready at %s in %.2fs", self.name, self.level, self.started_at)

    def _log_tail(self, size: int = 2000) -> str:
        """The end of the kernel's stderr (why it failed to start)."""
        try:
            with open(self.run_dir / "kernel.log", "rb") as handle:
                handle.seek(0, os.SEEK_END)
                handle.seek(max(0, handle.tell() - size))
                return handle.read().decode("utf-8", "replace").strip()
        except OSError:
            return ""

    async def execute(self, code: str, limit_s: float) -> CellResult:
        """Run one cell; on timeout interrupt, and past the grace report it for a restart."""
        assert self.client is not None
        self.busy = True
        try:
            return await self._execute(code, limit_s)
        finally:
            self.busy = False
            self.last_used = time.monotonic()

    async def _execute(self, code: str, limit_s: float) -> CellResult:
        assert self.client is not None
        assert self.channels is not None
        self.channels.dropped_messages()
        collector = OutputCollector(self.config.output_bytes)
        # stop_on_error=False: the cell after an interrupt must not come back "aborted".
        msg_id = self.client.execute(code, stop_on_error=False, allow_stdin=False)
        try:
            reply = await self._collect(msg_id, collector, time.monotonic() + limit_s)
        except asyncio.CancelledError:
            await asyncio.shield(self.interrupt())
            raise
        result = collector.result
        if reply is None:
            result.status = "died" if not self.alive else "timeout"
            if result.status == "timeout":
                result.notes.append(f"TimeoutError: the cell ran longer than {limit_s:g} s")
                if await self._interrupted(msg_id, collector):
                    result.status = "error"
                    result.notes.append("the cell was interrupted; the kernel kept its state")
                    result.ename = "TimeoutError"
                    result.evalue = f"the cell ran longer than {limit_s:g} s and was interrupted"
                    result.traceback = []
                    return result
            return result
        if self.channels.dropped_messages():
            collector.truncate()
            await self.channels.reconnect_iopub()
        elif not collector.idle and self.alive:
            collector.truncate()
        result.execution_count = reply["content"].get("execution_count")
        if reply["content"].get("status") != "ok" and result.status == "ok":
            result.status = "error"
            content = reply["content"]
            result.ename = result.ename or content.get("ename", "")
            result.evalue = result.evalue or content.get("evalue", "")
        return result

    async def _interrupted(self, msg_id: str, collector: OutputCollector) -> bool:
        """Send an interrupt and wait the grace period for the cell to end."""
        await self.interrupt()
        deadline = time.monotonic() + self.config.interrupt_grace_s
        return await self._collect(msg_id, collector, deadline) is not None

    async def _collect(
        self, msg_id: str, collector: OutputCollector, deadline: float
    ) -> dict[str, Any] | None:
        """Feed IOPub messages of ``msg_id`` until its reply (and idle) arrive, or None."""
        assert self.client is not None
        iopub = self.client.iopub_channel
        shell = self.client.shell_channel
        poller = zmq.asyncio.Poller()
        poller.register(iopub.socket, zmq.POLLIN)
        poller.register(shell.socket, zmq.POLLIN)
        reply: dict[str, Any] | None = None
        idle_deadline = 0.0
        while True:
            now = time.monotonic()
            if reply is not None:
                # Idle follows the reply at once; a lost one (dropped connection) costs
                # _IDLE_GRACE_S. 0.5 s was too short on a loaded host (load average 15 on 2
                # cores): a cell's output still on its way was dropped and the cell marked
                # truncated (seen in tests/fleet/test_fleet.py).
                if collector.idle or now > idle_deadline:
                    return reply
            elif now >= deadline or not self.alive:
                return None
            wait = min(_POLL_MS, max(1, int(((idle_deadline if reply else deadline) - now) * 1000)))
            ready = dict(await poller.poll(wait))
            if iopub.socket in ready:
                msg = await iopub.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") == msg_id:
                    collector.feed(msg)
            if shell.socket in ready:
                msg = await shell.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") == msg_id and reply is None:
                    reply = msg
                    idle_deadline = time.monotonic() + _IDLE_GRACE_S

    async def interrupt(self) -> None:
        """Interrupt the running cell by a control message (a signal would hit the wrapper)."""
        if self.client is None or not self.alive:
            return
        msg = self.client.session.msg("interrupt_request", {})
        self.client.control_channel.send(msg)
        await asyncio.sleep(0)

    async def shutdown(self) -> None:
        """Ask the kernel to exit, then make sure the whole sandbox is gone."""
        if self.client is not None and self.alive:
            with contextlib.suppress(Exception):
                self.client.shutdown()
                for _ in range(10):
                    if not self.alive:
                        break
                    await asyncio.sleep(0.02)
        self.kill()

    def kill(self) -> None:
        """Kill every process of this sandbox and release its sockets and run dir."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(self.proc.pid, signal.SIGKILL)
            with contextlib.suppress(OSError):
                self.proc.kill()
        if self.proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=2)
        if self.cgroup is not None:
            self.cgroup.kill()
        self._close_client()
        shutil.rmtree(self.run_dir, ignore_errors=True)

    def _close_client(self) -> None:
        if self.channels is not None:
            self.channels.close()
            self.channels = None

    def oom_killed(self) -> bool:
        """Whether the memory cgroup killed a process of this kernel."""
        return self.cgroup is not None and self.cgroup.oom_killed()
