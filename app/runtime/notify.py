"""Cancel requests across replicas: PostgreSQL ``LISTEN/NOTIFY`` on one channel.

The listener has its own connection, outside the engine's pool (it is held for the process
lifetime). When it is lost (the database restarted, or a health check fails) it is opened
again with backoff, so cross-replica cancels keep working without a process restart; cancels
published while it was down are missed (the run then ends by itself or is cancelled again).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

log = logging.getLogger(__name__)
CHANNEL = "agentstation_cancel"


class CancelBus:
    """Delivers ``(run_id, mode)`` cancel requests to whichever replica owns the run."""

    def __init__(
        self,
        engine: AsyncEngine,
        on_cancel: Callable[[str, str], None],
        *,
        enabled: bool = True,
        connect_timeout_s: float = 5.0,
        check_s: float = 10.0,
        backoff_s: float = 0.2,
        max_backoff_s: float = 5.0,
    ) -> None:
        self.engine = engine
        self.on_cancel = on_cancel
        # Only where other replicas may run this database's runs (``RunStore.replicas``).
        self.enabled = enabled
        self.connect_timeout_s = connect_timeout_s
        self.check_s = check_s  # how often an idle listener is checked with a query
        self.backoff_s, self.max_backoff_s = backoff_s, max_backoff_s
        self.reconnects = 0  # times the listener was re-established (tests, diagnostics)
        self._listen_engine: AsyncEngine | None = None
        self._conn: AsyncConnection | None = None
        self._driver: Any = None  # the asyncpg connection listening now
        self._lost = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """Listen (PostgreSQL only; one process owns every SQLite run)."""
        if not self.enabled:
            return
        self._listen_engine = create_async_engine(
            self.engine.url, poolclass=NullPool, connect_args={"timeout": self.connect_timeout_s}
        )
        await self._listen()
        self._task = asyncio.create_task(self._supervise(), name="cancel-bus-listener")

    async def _listen(self) -> None:
        """Open the listening connection (raises when the database cannot be reached)."""
        assert self._listen_engine is not None
        self._lost.clear()
        conn = await self._listen_engine.connect()
        try:
            raw = await conn.get_raw_connection()
            driver: Any = raw.driver_connection
            await driver.add_listener(CHANNEL, self._received)
            driver.add_termination_listener(self._terminated)
        except BaseException:
            await _discard(conn)
            raise
        self._conn, self._driver = conn, driver

    def _terminated(self, driver: Any) -> None:
        # Only the current connection counts: one discarded earlier may report late.
        if driver is self._driver:
            self._lost.set()

    async def _supervise(self) -> None:
        """Wait until the connection is lost (or fails a check); then reopen it with backoff."""
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._lost.wait(), self.check_s)
            if not self._lost.is_set() and await self._alive():
                continue
            log.warning("cancel listener connection lost; reconnecting")
            await self._drop()
            await self._reconnect()

    async def _alive(self) -> bool:
        try:
            assert self._conn is not None
            await asyncio.wait_for(self._conn.exec_driver_sql("SELECT 1"), self.connect_timeout_s)
            await self._conn.rollback()
            return True
        except Exception as exc:
            log.warning("cancel listener check failed: %s: %s", type(exc).__name__, exc)
            return False

    async def _reconnect(self) -> None:
        delay = self.backoff_s
        attempt = 0
        while True:
            attempt += 1
            try:
                await self._listen()
            except Exception as exc:
                log.warning(
                    "cancel listener reconnect %d failed (%s: %s); retrying in %.1fs",
                    attempt, type(exc).__name__, exc, delay,
                )  # fmt: skip
                await asyncio.sleep(delay)
                delay = min(delay * 2, self.max_backoff_s)
                continue
            self.reconnects += 1
            log.info("cancel listener re-established after %d attempt(s)", attempt)
            return

    async def _drop(self) -> None:
        conn, self._conn, self._driver = self._conn, None, None
        if conn is not None:
            await _discard(conn)

    def _received(self, _conn: Any, _pid: int, _channel: str, payload: str) -> None:
        run_id, _, mode = payload.partition(" ")
        self.on_cancel(run_id, mode or "cancelled")

    async def publish(self, run_id: str, mode: str) -> None:
        """Ask every replica to cancel ``run_id``."""
        async with self.engine.connect() as conn:
            await conn.execute(sa.select(sa.func.pg_notify(CHANNEL, f"{run_id} {mode}")))
            await conn.commit()

    async def aclose(self) -> None:
        """Stop listening."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self._drop()
        if self._listen_engine is not None:
            await self._listen_engine.dispose()
            self._listen_engine = None


async def _discard(conn: AsyncConnection) -> None:
    """Close a connection that may already be dead."""
    with contextlib.suppress(Exception):
        await conn.invalidate()
    with contextlib.suppress(Exception):
        await conn.close()
