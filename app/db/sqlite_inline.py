"""SQLite for the async engine, each call made at once on the event loop's thread.

aiosqlite runs every call (cursor, execute, fetch, close, commit) on a worker thread and
wakes the loop with the result: about 70 thread round trips per session turn, each a GIL
hand-off, cost ~3 ms of CPU per turn (10.4 → 7.7 ms for a streamed 64-chunk turn at
concurrency 32, docs/operations.md). Local SQLite statements in WAL mode with
``synchronous=NORMAL`` take microseconds and never wait for a disk flush at commit, and this
process's write transactions already take turns (``app.runtime.store.writes.WriteGate``), so a
statement never waits for another of ours. Requests' own ORM transactions are not gated: they
must not await anything but their statements between their first write and their commit (a
kernel stop, a run's cancel go before the first write or after the commit, as
``DELETE /v1/sessions/{id}`` does), else another write of ours busy-waits on the loop's thread
and neither can go on until ``busy_timeout``. What may block the loop: another *process*
holding SQLite's write lock (up to ``busy_timeout``) and large statements (a long history
replaced at once), which is why PostgreSQL is the production database.

The connection keeps aiosqlite's API (SQLAlchemy's aiosqlite dialect drives it, through the
documented ``async_creator`` hook): only its thread is gone.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Coroutine, Generator
from typing import Any

import aiosqlite
from sqlalchemy.engine import make_url


class InlineConnection(aiosqlite.Connection):
    """An aiosqlite connection whose calls run in the calling thread (no worker thread)."""

    def __await__(self) -> Generator[Any, None, InlineConnection]:
        return self._open().__await__()

    async def _open(self) -> InlineConnection:
        if self._connection is None:
            self._connection = self._connector()
        return self

    async def _execute(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        if not self._running or self._connection is None:
            raise ValueError("Connection closed")
        return fn(*args, **kwargs)

    def stop(self) -> None:  # nothing to wait for: no thread
        self._running = False
        conn, self._connection = self._connection, None
        if conn is not None:
            conn.close()

    async def close(self) -> None:
        self.stop()


def inline_creator(url: str, timeout_s: float = 30.0) -> Callable[[], Coroutine[Any, Any, Any]]:
    """``create_async_engine(url, async_creator=...)`` for a ``sqlite+aiosqlite`` URL."""
    parsed = make_url(url)
    database = parsed.database or ":memory:"
    uri = str(parsed.query.get("uri", "")).lower() in ("1", "true")

    def connector() -> sqlite3.Connection:
        return sqlite3.connect(database, timeout=timeout_s, check_same_thread=False, uri=uri)

    async def create() -> InlineConnection:
        return await InlineConnection(connector, 64)

    return create
