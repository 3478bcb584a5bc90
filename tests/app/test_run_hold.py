"""A run's hold on its session (PostgreSQL): every way a run ends lets the session's run lock go,
and no connection that may be broken, or may still hold the lock, goes back to the pool.

The hold is ``SessionLocks.running`` (app/runtime/store/locks.py) with the turn's
``TurnLease``: a session-level advisory lock on a pooled connection kept for the run, taken
there or handed over by the run's admission (a lease with ``locked=True``). Each test ends one
way (the run's end released the lock, an error, a cancel, a lost connection) and checks from
another connection that the lock is free, that the run slot is back, and which connections the
pool took back.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.db import raw
from app.db.engine import create_engine
from app.runtime.store import pg_sql
from app.runtime.store.locks import SessionLocks, TurnLease, advisory_key, run_slots
from tests.app.conftest import PG_URL

pytestmark = pytest.mark.postgres

# What pg_sql.store_end's END_UNLOCK does after storing a run's end: the session-level lock is
# released at that statement's commit (a transaction lock on the key bridges the gap).
END_UNLOCK = "SELECT pg_advisory_unlock($1) FROM (SELECT pg_advisory_xact_lock($1) OFFSET 0) AS h"


class Pool:
    """The engine under test, with the asyncpg connections its pool took back."""

    def __init__(self, engine: AsyncEngine) -> None:
        self.engine = engine
        self.locks = SessionLocks(engine)
        self.returned: list[Any] = []

        def on_checkin(dbapi_conn: Any, _record: Any) -> None:
            # None: an invalidated connection (discarded, never handed out again).
            if dbapi_conn is not None:
                self.returned.append(dbapi_conn.driver_connection)

        event.listen(engine.sync_engine.pool, "checkin", on_checkin)


@pytest.fixture
async def pool() -> AsyncIterator[Pool]:
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    engine = create_engine(PG_URL, pool_size=2, max_overflow=1)
    try:
        yield Pool(engine)
    finally:
        await engine.dispose()


@pytest.fixture
async def other() -> AsyncIterator[AsyncEngine]:
    """Connections outside the pool under test (another replica, the database's admin)."""
    assert PG_URL is not None
    engine = create_async_engine(PG_URL, poolclass=NullPool)
    try:
        yield engine
    finally:
        await engine.dispose()


def _session() -> str:
    return f"ses_{uuid.uuid4().hex}"


async def _free(other: AsyncEngine, session_pk: str) -> bool:
    """Whether another connection can take the session's run lock now (then lets it go)."""
    key = advisory_key(session_pk)
    async with other.connect() as conn:
        got = bool(await conn.scalar(sa.select(sa.func.pg_try_advisory_lock(key))))
        if got:
            await conn.scalar(sa.select(sa.func.pg_advisory_unlock(key)))
        await conn.commit()
    return got


async def _settled(pool: Pool) -> None:
    """Connections returned in the background are back; every slot is free again."""
    await pool.locks.drain()
    assert pool.locks.returning == 0
    assert pool.locks._slots._value == run_slots(pool.engine)


async def _pooled_still_work(pool: Pool) -> None:
    """Every connection the pool hands out now answers."""
    conns = [await pool.engine.connect() for _ in range(3)]
    try:
        for conn in conns:
            assert await conn.scalar(sa.select(1)) == 1
    finally:
        for conn in conns:
            await conn.close()


async def _admitted(pool: Pool, session_pk: str) -> TurnLease:
    """A hold as the run's admission hands it over: its connection already holds the lock."""
    hold = TurnLease(pool.locks, key=advisory_key(session_pk))
    hold.conn = await raw.checkout(pool.engine)
    hold.pg = raw.driver_of(hold.conn)
    await pg_sql.lock(hold.pg, hold.key)
    hold.locked = True
    assert await pool.locks.try_take_slot()
    hold.slot = True
    return hold


async def _end(hold: TurnLease) -> None:
    """The run's end, stored on the lock's connection: its commit releases the lock."""
    assert await raw.fetchrow(hold.pg, END_UNLOCK, hold.key) is not None
    hold.locked = False  # as PgRunStore.store_end records it


@pytest.mark.parametrize("admitted", [False, True], ids=["locked_at_start", "admitted"])
async def test_a_run_that_ends_frees_the_session_and_returns_its_connection(
    pool: Pool, other: AsyncEngine, admitted: bool
) -> None:
    session_pk = _session()
    held = await _admitted(pool, session_pk) if admitted else TurnLease()
    async with pool.locks.running(session_pk, held) as hold:
        assert hold.locked and not await _free(other, session_pk)
        pg = hold.pg
        await _end(hold)
    await _settled(pool)
    assert await _free(other, session_pk)
    assert pg in pool.returned  # healthy and unlocked: reused (no reconnect per run)
    await _pooled_still_work(pool)


@pytest.mark.parametrize("admitted", [False, True], ids=["locked_at_start", "admitted"])
async def test_a_run_that_fails_frees_the_session(
    pool: Pool, other: AsyncEngine, admitted: bool
) -> None:
    session_pk = _session()
    held = await _admitted(pool, session_pk) if admitted else TurnLease()
    with pytest.raises(RuntimeError, match="the agent broke"):
        async with pool.locks.running(session_pk, held) as hold:
            pg = hold.pg
            raise RuntimeError("the agent broke")
    await _settled(pool)
    assert await _free(other, session_pk)
    assert pg in pool.returned  # unlocked by its own statement first, then reused
    await _pooled_still_work(pool)


@pytest.mark.parametrize("admitted", [False, True], ids=["locked_at_start", "admitted"])
async def test_a_cancelled_run_frees_the_session(
    pool: Pool, other: AsyncEngine, admitted: bool
) -> None:
    session_pk = _session()
    held = await _admitted(pool, session_pk) if admitted else TurnLease()
    inside = asyncio.Event()
    seen: list[Any] = []

    async def run() -> None:
        async with pool.locks.running(session_pk, held) as hold:
            seen.append(hold.pg)
            inside.set()
            await asyncio.sleep(30)

    task = asyncio.create_task(run())
    await inside.wait()
    assert not await _free(other, session_pk)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _settled(pool)
    assert await _free(other, session_pk)
    assert seen[0] in pool.returned
    await _pooled_still_work(pool)


async def test_a_run_cancelled_while_queued_lets_its_admitted_lock_go(
    pool: Pool, other: AsyncEngine
) -> None:
    # Its admission took the lock, but a run of this process still holds the session here
    # (FIFO): cancelled while waiting, it never uses the hold, which must not leak.
    session_pk = _session()
    first_in = asyncio.Event()
    release_first = asyncio.Event()

    async def first() -> None:
        # A run of this process that still holds the session here (its lock already let go).
        async with pool.locks._hold(pool.locks._run, session_pk):
            first_in.set()
            await release_first.wait()

    blocker = asyncio.create_task(first())
    await first_in.wait()
    held = await _admitted(pool, session_pk)
    pg = held.pg

    async def second() -> None:
        async with pool.locks.running(session_pk, held):
            raise AssertionError("never runs: cancelled while queued")

    waiter = asyncio.create_task(second())
    await asyncio.sleep(0.05)
    assert not await _free(other, session_pk)
    waiter.cancel()
    with pytest.raises(asyncio.CancelledError):
        await waiter
    release_first.set()
    await blocker
    await _settled(pool)
    assert await _free(other, session_pk)
    assert pg in pool.returned
    await _pooled_still_work(pool)


async def test_an_admission_that_fails_lets_its_lock_go(pool: Pool, other: AsyncEngine) -> None:
    # The admission took the lock, then failed before a job owned the hold: it releases it.
    session_pk = _session()
    held = await _admitted(pool, session_pk)
    pg = held.pg
    await pool.locks.release(held)
    await pool.locks.release(held)  # once: a second release is a no-op
    await _settled(pool)
    assert await _free(other, session_pk)
    assert pg in pool.returned


async def _terminate(other: AsyncEngine, pg: Any) -> None:
    """The database ends the connection's backend (a crash, an admin, a failover)."""
    async with other.connect() as conn:
        assert await conn.scalar(sa.select(sa.func.pg_terminate_backend(pg.get_server_pid())))
        await conn.commit()
    for _ in range(100):  # until the client side has seen it
        if pg.is_closed():
            return
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("admitted", [False, True], ids=["locked_at_start", "admitted"])
async def test_a_lost_connection_found_at_the_end_is_discarded(
    pool: Pool, other: AsyncEngine, admitted: bool
) -> None:
    # The run's end fails on the lost connection (finish marks the hold broken and stores the
    # end on a pooled connection instead): the dead connection is discarded, not pooled.
    session_pk = _session()
    held = await _admitted(pool, session_pk) if admitted else TurnLease()
    async with pool.locks.running(session_pk, held) as hold:
        pg = hold.pg
        await _terminate(other, pg)
        with pytest.raises(raw.DriverError):
            try:
                await _end(hold)
            except BaseException:
                hold.broken = True  # as TurnLease.using() does
                raise
    await _settled(pool)
    assert await _free(other, session_pk)  # its database session, and its lock, are gone
    assert pg not in pool.returned
    await _pooled_still_work(pool)


async def test_a_lost_connection_found_at_release_is_discarded(
    pool: Pool, other: AsyncEngine
) -> None:
    # Lost while the run did not use it (its end failed elsewhere first): the unlock statement
    # fails; the connection is discarded and the error surfaces (nothing pretends it unlocked).
    session_pk = _session()
    with pytest.raises(raw.DriverError):
        async with pool.locks.running(session_pk, TurnLease()) as hold:
            pg = hold.pg
            await _terminate(other, pg)
    await _settled(pool)
    assert await _free(other, session_pk)
    assert pg not in pool.returned
    await _pooled_still_work(pool)


async def test_a_lock_statement_that_did_not_return_discards_the_connection(
    pool: Pool, other: AsyncEngine
) -> None:
    # Cancelled while waiting for the lock inside PostgreSQL (another replica holds it): the
    # statement may still be in progress, and may still take the lock: never pooled again.
    session_pk = _session()
    key = advisory_key(session_pk)
    async with other.connect() as blocker:
        assert await blocker.scalar(sa.select(sa.func.pg_try_advisory_lock(key)))
        await blocker.commit()
        before = len(pool.returned)
        waiter = asyncio.create_task(pool.locks.running(session_pk, TurnLease()).__aenter__())
        await asyncio.sleep(0.2)
        waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        await blocker.scalar(sa.select(sa.func.pg_advisory_unlock(key)))
        await blocker.commit()
    await _settled(pool)
    # Free once the discarded connection's backend, granted the lock after the blocker let go,
    # fails to answer and exits (PostgreSQL notices the lost client only then).
    for _ in range(50):
        if await _free(other, session_pk):
            break
        await asyncio.sleep(0.05)
    assert await _free(other, session_pk)
    assert len(pool.returned) == before  # the waiting connection was discarded
    await _pooled_still_work(pool)
