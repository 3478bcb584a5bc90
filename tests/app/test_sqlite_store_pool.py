"""The SQLite run store's statements on a pooled connection: what goes back to the pool."""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import raw
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import Base
from app.runtime.store.base import SessionNotFound
from app.runtime.store.sqlite import SqliteRunStore
from app.services.responses_plan import _CHAIN_END_SQLITE


@pytest.fixture
async def engine(tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    async with engine.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    yield engine
    await engine.dispose()


def _resets(engine: AsyncEngine) -> list[bool]:
    """Per connection back to the pool: whether it came back with nothing to roll back."""
    seen: list[bool] = []

    def on_reset(_dbapi: Any, _record: Any, state: Any) -> None:
        seen.append(state.transaction_was_reset)

    event.listen(engine.sync_engine.pool, "reset", on_reset)
    return seen


async def test_reads_and_committed_writes_go_back_without_a_rollback(engine: AsyncEngine) -> None:
    store = SqliteRunStore(engine, create_sessionmaker(engine))
    resets = _resets(engine)
    with pytest.raises(SessionNotFound):
        await store.lookup(store.lease(), "tenant", "no-such-session")  # a read
    await store.append_events([])  # a write transaction, committed
    assert resets == [True, True]
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_connection_left_in_a_transaction_is_rolled_back(engine: AsyncEngine) -> None:
    resets = _resets(engine)

    def begin_and_fail(handle: sqlite3.Connection) -> None:
        handle.execute("BEGIN IMMEDIATE")
        handle.execute("DELETE FROM tenants")
        raise RuntimeError("mid-transaction")

    with pytest.raises(RuntimeError):
        await raw.on_sqlite(engine, begin_and_fail)
    assert resets == [False]  # the pool's reset ROLLBACK

    def in_transaction(handle: sqlite3.Connection) -> bool:
        return handle.in_transaction

    assert await raw.on_sqlite(engine, in_transaction) is False
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_a_failed_write_transaction_is_rolled_back(engine: AsyncEngine) -> None:
    store = SqliteRunStore(engine, create_sessionmaker(engine))
    with pytest.raises(sqlite3.IntegrityError):  # a run without its session: rolled back
        await store.append_events(
            [{"run_id": "r", "seq": 1, "type": "x", "data": {}, "created_at": None}]
        )
    await store.append_events([])  # the write path is free again (the gate, the connection)
    assert engine.sync_engine.pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_the_chain_end_finds_the_latest_run_without_sorting_the_sessions_runs(
    engine: AsyncEngine,
) -> None:
    """The chain end's "latest run of the session" is one step of an index (migration 0014:
    the models match the migrations, tests/app/test_migrations.py), not a sort of all the
    session's runs (a cost that grew with the chain)."""

    def plan(handle: sqlite3.Connection) -> list[str]:
        rows = handle.execute("EXPLAIN QUERY PLAN " + _CHAIN_END_SQLITE, ("r",)).fetchall()
        return [row[3] for row in rows]

    steps = await raw.on_sqlite(engine, plan)
    assert any("ix_runs_session_pk_created_at" in step for step in steps), steps
    assert not any("TEMP B-TREE" in step for step in steps), steps


async def test_the_connection_back_last_is_the_next_one_out(engine: AsyncEngine) -> None:
    """LIFO: the run store's next transaction gets the connection used last, whose page
    cache is still valid; another connection's would be reset by that write (SQLite drops a
    connection's whole cache when the database changed under it) and its pages read again."""

    def handle_of(handle: sqlite3.Connection) -> sqlite3.Connection:
        return handle

    async with engine.connect() as held:  # two connections out at once: the pool holds both
        await held.exec_driver_sql("SELECT 1")
        raw_held = await held.get_raw_connection()
        last = raw_held.driver_connection._connection  # type: ignore[union-attr]
        first = await raw.on_sqlite(engine, handle_of)
    # ``first`` went back before ``held``'s connection: a FIFO pool would give ``first`` now.
    assert first is not last
    assert await raw.on_sqlite(engine, handle_of) is last
    assert await raw.on_sqlite(engine, handle_of) is last  # and again: not the other one
