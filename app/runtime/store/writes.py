"""One writer at a time on SQLite: this process's write transactions queue in memory.

SQLite allows a single writer; concurrent writers on separate connections otherwise sleep in
its busy handler (backing off up to 100 ms a try), which collapsed the session path's
throughput under concurrency. Holders only ever run one short transaction under the gate and
never wait for a run or session lock while holding it, so it cannot deadlock with those.
On PostgreSQL the gate is open.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine


class WriteGate:
    """Serialises write transactions on SQLite; a no-op elsewhere."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.serial = engine.dialect.name == "sqlite"
        self._lock = asyncio.Lock()

    @asynccontextmanager
    async def hold(self) -> AsyncIterator[None]:
        """Held around one write transaction."""
        if not self.serial:
            yield
            return
        async with self._lock:
            yield
