"""The client side of one kernel: zmq sockets with a size cap, readiness, IOPub recovery."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from pathlib import Path

import zmq
import zmq.asyncio
from jupyter_client.asynchronous import AsyncKernelClient


class KernelStartError(RuntimeError):
    """The kernel process could not be started or never answered."""


class KernelChannels:
    """An ``AsyncKernelClient`` whose IOPub drops over-size messages and is watched for it."""

    def __init__(self, connection_file: Path, max_message_bytes: int) -> None:
        ctx = zmq.asyncio.Context()
        # A message over this size drops the connection instead of being read into memory.
        ctx.setsockopt(zmq.MAXMSGSIZE, max_message_bytes)
        ctx.setsockopt(zmq.RCVHWM, 64)
        ctx.setsockopt(zmq.LINGER, 0)
        self._context = ctx
        self._monitor: zmq.Socket[bytes] | None = None
        self._monitor_async: zmq.Socket[bytes] | None = None
        self.client = AsyncKernelClient(context=ctx)
        try:
            self.client.load_connection_file(str(connection_file))
            self.client.start_channels(hb=False)
            self._watch_iopub()
        except BaseException:  # nobody will own this object: close what it opened
            self.close()
            raise

    def _watch_iopub(self) -> None:
        socket = self.client.iopub_channel.socket
        assert socket is not None
        self._monitor_async = socket.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        # A blocking view of the monitor socket, read without awaiting.
        self._monitor = zmq.Socket.shadow(self._monitor_async.underlying)

    def _unwatch_iopub(self) -> None:
        """Stop monitoring IOPub and close the monitor's PAIR socket (every path ends here)."""
        self._monitor = None
        monitor, self._monitor_async = self._monitor_async, None
        if monitor is None:
            return
        socket = self.client.iopub_channel.socket if self.client.iopub_channel else None
        with contextlib.suppress(Exception):
            if socket is not None and not socket.closed:
                socket.disable_monitor()
        monitor.close(linger=0)

    def dropped_messages(self) -> bool:
        """Whether IOPub was disconnected (an over-size message) since the last check."""
        dropped = False
        if self._monitor is None:
            return False
        while True:
            try:
                self._monitor.recv_multipart(flags=zmq.NOBLOCK)
            except zmq.Again:
                return dropped
            dropped = True

    async def reconnect_iopub(self) -> None:
        """A dropped IOPub connection does not come back by itself: open a new socket."""
        self._unwatch_iopub()
        self.client.iopub_channel.close()
        self.client._iopub_channel = None
        self.client.iopub_channel.start()
        self._watch_iopub()
        await self._until_iopub_live(time.monotonic() + 2)
        await self.drain_shell()
        await self.drain_iopub(0.02)

    async def _until_iopub_live(self, deadline: float) -> bool:
        """PUB/SUB drops what is sent before the subscription lands: wait for proof it did
        (a request's status message arriving on IOPub)."""
        while time.monotonic() < deadline:
            self.client.kernel_info()
            with contextlib.suppress(Exception):
                await self.client.get_iopub_msg(timeout=0.1)
                return True
        return False

    async def wait_ready(self, alive: Callable[[], bool], timeout_s: float) -> None:
        """Until the kernel answers ``kernel_info``; raises if it exits or stays silent."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if not alive():
                raise KernelStartError("kernel exited during start-up")
            # Replies to earlier requests count too: any answer means the kernel is up.
            self.client.kernel_info()
            with contextlib.suppress(Exception):
                reply = await self.client.get_shell_msg(timeout=0.25)
                if reply["msg_type"] == "kernel_info_reply":
                    # The shell answering says nothing of IOPub: without this the first
                    # cell's output and idle status could be lost (slow joiner).
                    if not await self._until_iopub_live(deadline):
                        break
                    await self.drain_shell()
                    await self.drain_iopub(0.05)
                    return
        raise KernelStartError(f"kernel did not answer within {timeout_s:g} s")

    async def drain_shell(self) -> None:
        """Discard queued shell replies."""
        with contextlib.suppress(Exception):
            while True:
                await self.client.get_shell_msg(timeout=0)

    async def drain_iopub(self, wait: float) -> None:
        """Discard IOPub messages until none arrives for ``wait`` seconds."""
        with contextlib.suppress(Exception):
            while True:
                await self.client.get_iopub_msg(timeout=wait)

    def close(self) -> None:
        """Close every socket and the context (idempotent, and never half-way: one socket
        failing to close must not leave the others open)."""
        with contextlib.suppress(Exception):
            self._unwatch_iopub()
        for name in ("_shell_channel", "_iopub_channel", "_stdin_channel", "_control_channel"):
            channel = getattr(self.client, name, None)
            socket = getattr(channel, "socket", None) if channel is not None else None
            if socket is not None:
                _close_socket(socket)
        with contextlib.suppress(Exception):
            self.client.stop_channels()
        if not self._context.closed:
            with contextlib.suppress(Exception):
                self._context.destroy(linger=0)


def _close_socket(socket: zmq.Socket[bytes]) -> None:
    """Close ``socket``; if the asyncio layer fails (its loop no longer knows the fd, seen as
    ``KeyError: 'N is not registered'``), close the zmq socket itself all the same."""
    if socket.closed:
        return
    try:
        socket.close(linger=0)
    except Exception:
        with contextlib.suppress(Exception):
            zmq.Socket.close(socket, linger=0)
