"""Cancel requests across replicas: PostgreSQL ``LISTEN/NOTIFY`` on one channel."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

log = logging.getLogger(__name__)
CHANNEL = "agentstation_cancel"


class CancelBus:
    """Delivers ``(run_id, mode)`` cancel requests to whichever replica owns the run."""

    def __init__(self, engine: AsyncEngine, on_cancel: Callable[[str, str], None]) -> None:
        self.engine = engine
        self.on_cancel = on_cancel
        self.enabled = engine.dialect.name == "postgresql"
        self._conn: AsyncConnection | None = None

    async def start(self) -> None:
        """Listen (PostgreSQL only; one process owns every SQLite run)."""
        if not self.enabled:
            return
        self._conn = await self.engine.connect()
        raw = await self._conn.get_raw_connection()
        await raw.driver_connection.add_listener(CHANNEL, self._received)  # type: ignore[union-attr]

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
        if self._conn is not None:
            await self._conn.close()
            self._conn = None
