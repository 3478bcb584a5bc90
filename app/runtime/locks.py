"""One writer per session: a process-local FIFO lock plus a PostgreSQL advisory lock (replicas)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine

from app.db import raw
from app.runtime import pgturn


@functools.lru_cache(maxsize=4096)
def advisory_key(name: str) -> int:
    """A stable signed 64-bit key for ``pg_advisory_lock`` (recent ones cached)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


def run_slots(engine: AsyncEngine) -> int:
    """How many runs may hold a lock connection at once: the engine's pool less a reserve
    (a fifth, at least 4, or half of a smaller pool) for the short statements runs need (lookups,
    admissions, event writes). Half the pool (20 of the default 40) queued a 32-session
    load's runs behind each other: 11.7 s instead of 8.0 s for 320 turns (docs/operations.md)."""
    pool = engine.sync_engine.pool
    size = getattr(pool, "size", None)
    if size is None:  # a pool without a bound (NullPool, StaticPool)
        return 1_000_000
    capacity = int(size()) + max(int(getattr(pool, "_max_overflow", 0)), 0)
    return max(1, capacity - max(capacity // 5, min(capacity // 2, 4)))


class SessionLocks:
    """Serialises runs (and run admission) per session."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.postgres = engine.dialect.name == "postgresql"
        # A running run holds a pooled connection (its advisory lock) and needs others to make
        # progress; capping lock holders below the pool keeps a reserve free, so many busy
        # sessions queue here instead of deadlocking the pool (30 s pool timeouts for everyone).
        self._slots = asyncio.Semaphore(run_slots(engine))
        # key -> (lock, holders + waiters); entries go when unused, so idle sessions cost nothing.
        self._run: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._admit: dict[str, tuple[asyncio.Lock, list[int]]] = {}
        self._returning: set[asyncio.Task[None]] = set()  # see _let_go

    @asynccontextmanager
    async def _hold(
        self, table: dict[str, tuple[asyncio.Lock, list[int]]], key: str
    ) -> AsyncIterator[None]:
        lock, users = table.setdefault(key, (asyncio.Lock(), [0]))
        users[0] += 1
        try:
            async with lock:
                yield
        finally:
            users[0] -= 1
            if users[0] == 0:
                table.pop(key, None)

    @asynccontextmanager
    async def admission(self, key: str) -> AsyncIterator[None]:
        """Held while checking whether a session is busy and creating a run (in this process)."""
        async with self._hold(self._admit, key):
            yield

    @asynccontextmanager
    async def running(self, key: str, held: RunHold | None = None) -> AsyncIterator[RunHold]:
        """Held for a whole run: waits (FIFO in this process) for earlier runs of the session.

        On PostgreSQL the run also holds the session's run lock, a session-level advisory lock
        on a pooled connection kept for the run (``RunHold.conn``; ``held``: taken already by
        the run's admission on that connection). The run's end is stored on that connection
        in autocommit; the lock is released after it, so the next run sees it. A connection
        whose release fails is discarded (its lock ends with its database session).
        """
        try:
            async with self._hold(self._run, key):
                if not self.postgres:
                    yield RunHold()
                    return
                if held is not None:
                    yield held
                    return
                await self._slots.acquire()
                hold = RunHold(key=advisory_key(key), slot=True)
                try:
                    hold.conn = await self.engine.connect()
                    hold.pg = await raw.driver(hold.conn)
                    hold.locked = None  # unknown until the statement returns
                    await pgturn.lock(hold.pg, hold.key)
                    hold.locked = True
                    yield hold
                finally:
                    await self._let_go(hold)
        finally:
            if held is not None:  # also when cancelled while waiting behind another run
                await self._let_go(held)

    async def _let_go(self, hold: RunHold) -> None:
        """``release``; in the background when the lock is known released (by the run's end,
        with its commit) and only the connection's return to the pool is left."""
        if hold.conn is None or hold.locked is not False or hold.broken:
            await self.release(hold)
            return
        task = asyncio.create_task(self.release(hold))
        self._returning.add(task)
        task.add_done_callback(self._returning.discard)

    @property
    def returning(self) -> int:
        """Connections being returned to the pool in the background now."""
        return len(self._returning)

    async def drain(self) -> None:
        """Until connections being returned in the background are back (shutdown)."""
        for task in list(self._returning):
            with contextlib.suppress(BaseException):
                await task

    async def try_take_slot(self) -> bool:
        """Take a run slot if one is free now; never waits (an admission must not wait for a
        slot while it holds a pooled connection: with the pool nearly all slots, requests
        holding connections while waiting for slots starved the runs that free them)."""
        if self._slots.locked():
            return False
        await self._slots.acquire()  # a free slot: returns without suspending
        return True

    async def take_slot(self) -> None:
        """Count a run that holds its session's lock from admission on (``held``)."""
        await self._slots.acquire()

    async def release(self, hold: RunHold) -> None:
        """Release the run lock and return its connection (once)."""
        conn, hold.conn = hold.conn, None
        try:
            if conn is None:
                return
            try:
                if hold.locked and not hold.broken:
                    await pgturn.unlock(hold.pg, hold.key)
                    hold.locked = False
                if hold.locked is False:
                    await conn.close()
                    return
            except BaseException:
                await raw.discard(conn)
                raise
            # A lock that may still be held must not go back to the pool.
            await raw.discard(conn)
        finally:
            if hold.slot:
                hold.slot = False
                self._slots.release()

    @asynccontextmanager
    async def try_hold(self, key: str) -> AsyncIterator[bool]:
        """On PostgreSQL: hold the session's run lock for the block if it is free (False:
        another connection holds it: a live run, here or on another replica). True elsewhere
        (one process owns a SQLite database's runs)."""
        if not self.postgres:
            yield True
            return
        async with self.engine.connect() as conn:
            got = bool(
                await conn.scalar(sa.select(sa.func.pg_try_advisory_lock(advisory_key(key))))
            )
            await conn.commit()
            try:
                yield got
            finally:
                if got:
                    await _unlock(conn, key)


@dataclass
class RunHold:
    """What holding a session gives a run: on PostgreSQL, the lock's connection."""

    conn: AsyncConnection | None = None
    pg: Any = None  # the asyncpg connection under ``conn``
    key: int = 0  # the run lock's advisory key
    locked: bool | None = False  # None: a lock statement did not return (unknown)
    slot: bool = False  # holds one of SessionLocks' run slots
    broken: bool = False  # a statement on ``conn`` failed: finish on a pooled connection


async def _unlock(conn: AsyncConnection, key: str) -> None:
    await conn.execute(sa.select(sa.func.pg_advisory_unlock(advisory_key(key))))
    await conn.commit()


async def lock_for_transaction(db: object, key: str) -> None:
    """On PostgreSQL, hold the session's admission lock until the transaction ends."""
    from sqlalchemy.ext.asyncio import AsyncSession

    assert isinstance(db, AsyncSession)
    if db.get_bind().dialect.name == "postgresql":
        await db.execute(sa.select(sa.func.pg_advisory_xact_lock(advisory_key("admit:" + key))))
