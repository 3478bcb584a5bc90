"""One MCP client connection, owned by a task of its own (the official ``mcp`` SDK's ``Client``
is an anyio context: it must be entered and left in one task), reused by every call of a session.

Calls are sent through a queue and answered in order; a call that times out marks the
connection broken (its server may be hung), so the next call opens a new one.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from agents import tracing

log = logging.getLogger(__name__)
# (the call, its answer, the caller's context when tracing is on: the call runs in it)
Job = tuple[Callable[[Any], Awaitable[Any]], "asyncio.Future[Any]", contextvars.Context | None]


class MCPConnectionError(RuntimeError):
    """The server could not be reached, or stopped answering."""


class MCPConnection:
    """A live ``mcp.Client`` in a task; ``call(fn)`` runs ``await fn(client)`` on it."""

    def __init__(self, connect: Callable[[], Awaitable[Any]], label: str) -> None:
        self._connect = connect  # async () -> an mcp.Client (not yet entered)
        self.label = label
        self._jobs: asyncio.Queue[Job | None] = asyncio.Queue()
        self._ready: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self.broken = False

    async def start(self, timeout_s: float) -> None:
        """Connect (the protocol's handshake included), within ``timeout_s``; a second caller
        waits for the first one's connection."""
        if self._ready is None:
            self._ready = asyncio.get_running_loop().create_future()
            # A connection given up on still fails later: that failure is expected, not lost.
            self._ready.add_done_callback(lambda f: f.cancelled() or f.exception())
            self._task = asyncio.create_task(self._serve(), name=f"mcp:{self.label}")
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), timeout_s)
        except TimeoutError:
            await self.aclose()
            raise MCPConnectionError(
                f"MCP server {self.label} did not answer within {timeout_s:g}s"
            ) from None

    async def _serve(self) -> None:
        assert self._ready is not None
        try:
            async with await self._connect() as client:
                self._ready.set_result(None)
                while (job := await self._jobs.get()) is not None:
                    fn, future, context = job
                    if future.done():  # its caller gave up
                        continue
                    try:
                        if context is None:
                            result = await fn(client)
                        else:  # traced: the SDK puts the caller's span into ``_meta``
                            call = _awaited(fn(client))
                            result = await asyncio.create_task(call, context=context)
                    except Exception as exc:
                        if not future.done():
                            future.set_exception(exc)
                    else:
                        if not future.done():
                            future.set_result(result)
        except BaseException as exc:
            self.broken = True
            if not self._ready.done():
                self._ready.set_exception(MCPConnectionError(f"MCP server {self.label}: {exc}"))
            self._fail_pending(exc)
            if not isinstance(exc, Exception):
                raise
            log.warning("MCP connection to %s ended: %s", self.label, exc, exc_info=exc)
        finally:
            self.broken = True

    def _fail_pending(self, exc: BaseException) -> None:
        while not self._jobs.empty():
            job = self._jobs.get_nowait()
            if job is not None and not job[1].done():
                job[1].set_exception(MCPConnectionError(f"MCP server {self.label}: {exc}"))

    async def call(self, fn: Callable[[Any], Awaitable[Any]], timeout_s: float) -> Any:
        """``await fn(client)`` on this connection; on timeout the connection is dropped."""
        if self.broken:
            raise MCPConnectionError(f"MCP server {self.label}: connection closed")
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        # A hook point (agents/tracing.py): with tracing on, the call runs in the caller's
        # context, so the request carries the caller's span (the tool call's), not this
        # connection's (whoever opened it).
        context = contextvars.copy_context() if tracing.TRACER is not None else None
        await self._jobs.put((fn, future, context))
        try:
            return await asyncio.wait_for(future, timeout_s)
        except TimeoutError:
            self.broken = True
            asyncio.get_running_loop().create_task(self.aclose())
            raise MCPConnectionError(
                f"MCP server {self.label} did not answer within {timeout_s:g}s"
            ) from None

    async def aclose(self) -> None:
        """Close the connection (ends its task; pending calls fail)."""
        self.broken = True
        task = self._task
        if task is None or task.done():
            return
        self._jobs.put_nowait(None)
        try:
            await asyncio.wait_for(asyncio.shield(task), 2.0)
        except (TimeoutError, Exception):
            task.cancel()
            with contextlib.suppress(BaseException):
                await task


class Connections:
    """Open connections by (session, server), reused across a session's calls and turns."""

    def __init__(self) -> None:
        # (event loop, session, server): a connection's task lives on one loop.
        self._open: dict[tuple[int, str, str], MCPConnection] = {}

    async def get(
        self,
        session: str,
        server: str,
        connect: Callable[[], Awaitable[Any]],
        timeout_s: float,
        label: str = "",
    ) -> MCPConnection:
        """The session's connection to ``server`` (a new one if none or broken)."""
        key = (id(asyncio.get_running_loop()), session, server)
        conn = self._open.get(key)  # looked up and stored without an await: no race
        if conn is None or conn.broken:
            conn = self._open[key] = MCPConnection(connect, label or server)
        try:
            await conn.start(timeout_s)
        except BaseException:
            if self._open.get(key) is conn:
                del self._open[key]
            raise
        return conn

    async def close_session(self, session: str) -> None:
        """Close every connection of ``session`` (when the session ends)."""
        keys = [k for k in self._open if k[1] == session]
        await asyncio.gather(*(self._open.pop(k).aclose() for k in keys))

    def count(self, session: str) -> int:
        """Open connections of ``session`` (on any loop)."""
        return sum(1 for k, c in self._open.items() if k[1] == session and not c.broken)

    async def aclose(self) -> None:
        """Close every connection of this event loop (at shutdown)."""
        here = id(asyncio.get_running_loop())
        conns = [self._open.pop(k) for k in list(self._open) if k[0] == here]
        await asyncio.gather(*(c.aclose() for c in conns))


#: The process's connections (per event loop use only: the service runs one loop).
CONNECTIONS = Connections()


async def _awaited(awaitable: Awaitable[Any]) -> Any:
    """``awaitable`` as a coroutine (what ``create_task`` takes)."""
    return await awaitable
