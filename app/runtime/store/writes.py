"""One writer at a time on SQLite: this process's write transactions queue in memory.

SQLite allows a single writer; concurrent writers on separate connections otherwise sleep in
its busy handler (backing off up to 100 ms a try), which collapsed the session path's
throughput under concurrency. Holders only ever run one short transaction under the gate and
never wait for a run or session lock while holding it, so it cannot deadlock with those.
On PostgreSQL the gate is open.
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractAsyncContextManager

from sqlalchemy.ext.asyncio import AsyncEngine

_OPEN: AbstractAsyncContextManager[None] = contextlib.nullcontext()


class WriteGate:
    """Serialises write transactions on SQLite; a no-op elsewhere."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.serial = engine.dialect.name == "sqlite"
        self._lock = asyncio.Lock()

    def hold(self) -> AbstractAsyncContextManager[None]:
        """Held around one write transaction (``async with gate.hold():``): the lock itself on
        SQLite, released on any exit, as ``async with lock`` does; nothing elsewhere. (An
        ``asynccontextmanager`` cost an async generator per transaction, two per SQLite turn.)"""
        return self._lock if self.serial else _OPEN
