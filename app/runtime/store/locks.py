"""One writer per session: a process-local FIFO lock plus a PostgreSQL advisory lock (replicas),
and ``TurnLease``, the one owner of a turn's connection, run lock and run slot."""

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
from app.errors import AppError
from app.runtime.store import pg_sql


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

    def _hold(self, table: dict[str, tuple[asyncio.Lock, list[int]]], key: str) -> _Held:
        return _Held(table, key)

    def admission(self, key: str) -> _Held:
        """Held while checking whether a session is busy and creating a run (in this process)."""
        return _Held(self._admit, key)

    @asynccontextmanager
    async def running(self, key: str, lease: TurnLease) -> AsyncIterator[TurnLease]:
        """Held for a whole run: waits (FIFO in this process) for earlier runs of the session.

        On PostgreSQL the run also holds the session's run lock, a session-level advisory lock
        on a pooled connection kept for the run (``lease``: taken already when its admission
        locked on that connection, else taken here). The run's end is stored on that connection
        in autocommit; the lock is released after it, so the next run sees it. Whatever the
        lease still holds is let go at the exit, however the block ends (also when cancelled
        while waiting behind another run); a connection whose release fails is discarded
        (its lock ends with its database session).
        """
        try:
            async with self._hold(self._run, key):
                if self.postgres and not lease.locked:
                    await self._slots.acquire()
                    lease.slot = True
                    lease.key = advisory_key(key)
                    if lease.conn is None:
                        lease.conn = await raw.checkout(self.engine)
                        lease.pg = raw.driver_of(lease.conn)
                    lease.locked = None  # unknown until the statement returns
                    await pg_sql.lock(lease.pg, lease.key)
                    lease.locked = True
                yield lease
        finally:
            await self._let_go(lease)

    async def _let_go(self, hold: TurnLease) -> None:
        """``release``; when the lock is known released (by the run's end, with its commit)
        and only the connection's return to the pool is left, at once when no transaction is
        open on it (no statement: the pool's bookkeeping), else in the background."""
        if hold.conn is None or hold.locked is not False or hold.broken or raw.idle(hold.conn):
            await self.release(hold)  # idle: returned without suspending (``raw.checkin``)
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

    @property
    def replicas(self) -> bool:
        """Whether other processes may run this database's runs (PostgreSQL: the session's
        run lock is shared by every replica; SQLite: one process per database)."""
        return self.postgres

    async def try_take_slot(self) -> bool:
        """Take a run slot if one is free now; never waits (an admission must not wait for a
        slot while it holds a pooled connection: with the pool nearly all slots, requests
        holding connections while waiting for slots starved the runs that free them)."""
        if self._slots.locked():
            return False
        await self._slots.acquire()  # a free slot: returns without suspending
        return True

    async def release(self, hold: TurnLease) -> None:
        """Release the run lock and return its connection (once)."""
        conn, hold.conn = hold.conn, None
        try:
            if conn is None:
                return
            try:
                if hold.locked and not hold.broken:
                    await pg_sql.unlock(hold.pg, hold.key)
                    hold.locked = False
                if hold.locked is False and not hold.broken:
                    await raw.checkin(conn)
                    return
            except BaseException:
                await raw.discard_checked_out(conn)
                raise
            # A lock that may still be held, or a statement that may still be in progress,
            # must not go back to the pool.
            await raw.discard_checked_out(conn)
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
class TurnLease:
    """A turn's hold on its session in the database: on PostgreSQL the pooled connection its
    lookup and admission use, which keeps the session's run lock (a session-level advisory
    lock) for the run, and one of ``SessionLocks``' run slots. Nothing on SQLite.

    One owner at a time, and the owner's ``async with lease:`` lets go of whatever is still
    held at its exit, however the block ends (answer, error, cancel, lost connection): the
    request owns it from the session's lookup to the run's admission; ``take()`` moves what it
    holds into a new lease for the run's task (the request's exit then lets go of nothing),
    whose ``SessionLocks.running`` block keeps it until the run's end. A statement on its
    connection runs inside ``using()``: one that fails or is cancelled marks the connection
    ``broken``, and a broken connection, or one whose lock state is unknown, is discarded,
    never pooled.
    """

    locks: SessionLocks | None = None
    # The pooled connection (``raw.checkout``: the pool's fairy, without SQLAlchemy's
    # ``Connection`` wrappers, which the raw statements do not use: ~28 instead of ~44 µs)
    conn: Any = None
    pg: Any = None  # the asyncpg connection under ``conn``
    key: int = 0  # the run lock's advisory key
    locked: bool | None = False  # None: a lock statement did not return (unknown)
    slot: bool = False  # holds one of SessionLocks' run slots
    broken: bool = False  # a statement on ``conn`` failed: finish on a pooled connection

    async def __aenter__(self) -> TurnLease:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.release()

    async def release(self) -> None:
        """Let go of everything still held (once; later calls do nothing)."""
        if self.locks is not None and (self.conn is not None or self.slot):
            await self.locks.release(self)

    def take(self) -> TurnLease:
        """A new lease with everything this one holds; this one is left holding nothing."""
        moved = TurnLease(
            self.locks, self.conn, self.pg, self.key, self.locked, self.slot, self.broken
        )
        self.conn, self.pg, self.locked, self.slot, self.broken = None, None, False, False, False
        return moved

    async def connection(self) -> Any:
        """The asyncpg connection (PostgreSQL), checked out of the pool on first use."""
        if self.conn is None:
            assert self.locks is not None
            self.conn = await raw.checkout(self.locks.engine)
            self.broken = False
            self.pg = raw.driver_of(self.conn)
        return self.pg

    def using(self) -> _Using:
        """Around statements on the lease's connection (``async with lease.using() as pg``):
        one that fails or is cancelled (it may still be in progress) marks the connection
        broken; an ``AppError`` raised in the block after its statements answered (a refusal:
        404, 409, ...) does not."""
        return _Using(self)


class _Held:
    """``SessionLocks``' per-key FIFO lock held for a block; the entry goes when unused.
    (A class rather than an ``asynccontextmanager``: two of these per turn, and a generator
    each cost ~10 more Python calls.)"""

    __slots__ = ("key", "lock", "table", "users")

    def __init__(self, table: dict[str, tuple[asyncio.Lock, list[int]]], key: str) -> None:
        self.table, self.key = table, key

    async def __aenter__(self) -> None:
        self.lock, self.users = self.table.setdefault(self.key, (asyncio.Lock(), [0]))
        self.users[0] += 1
        try:
            await self.lock.acquire()
        except BaseException:
            self._leave()
            raise

    async def __aexit__(self, *exc: object) -> None:
        self.lock.release()
        self._leave()

    def _leave(self) -> None:
        self.users[0] -= 1
        if self.users[0] == 0:
            self.table.pop(self.key, None)


class _Using:
    """``TurnLease.using()``: marks the lease's connection broken when its block fails,
    unless with an ``AppError``."""

    __slots__ = ("lease",)

    def __init__(self, lease: TurnLease) -> None:
        self.lease = lease

    async def __aenter__(self) -> Any:
        return await self.lease.connection()

    async def __aexit__(self, kind: type[BaseException] | None, *exc: object) -> None:
        if kind is not None and not issubclass(kind, AppError):
            self.lease.broken = True


async def _unlock(conn: AsyncConnection, key: str) -> None:
    await conn.execute(sa.select(sa.func.pg_advisory_unlock(advisory_key(key))))
    await conn.commit()


async def lock_for_transaction(db: object, key: str) -> None:
    """On PostgreSQL, hold the session's admission lock until the transaction ends."""
    from sqlalchemy.ext.asyncio import AsyncSession

    assert isinstance(db, AsyncSession)
    if db.get_bind().dialect.name == "postgresql":
        await db.execute(sa.select(sa.func.pg_advisory_xact_lock(advisory_key("admit:" + key))))
