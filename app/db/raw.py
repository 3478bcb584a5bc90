"""Statements sent straight to asyncpg (PostgreSQL hot paths), with hooks to count them.

SQLAlchemy costs ~100-300 µs of Python per statement (session, compilation cache lookup,
result objects); a session turn's few PostgreSQL statements go to the driver instead, on a
connection checked out from the engine's pool. They bypass the engine's
``before_cursor_execute`` events, so each is reported to ``listeners`` (tests count them); the
SQLite run store's plain ``sqlite3`` statements report there too (``report``).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

import asyncpg
from sqlalchemy.engine import Connection, Engine
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.util import greenlet_spawn

T = TypeVar("T")

# Every asyncpg error, InternalClientError included ("another operation is in progress").
DRIVER_ERRORS = (asyncpg.PostgresError, asyncpg.InterfaceError, asyncpg.InternalClientError)


class DriverError(SQLAlchemyError):
    """An asyncpg error of a raw statement (the driver's error is its ``__cause__``), raised as
    a SQLAlchemy error so callers and the app's error handlers treat both paths alike (a lost
    database is a 503 ``database_unavailable``, not an unhandled error)."""


# Called with each statement's SQL before it is sent.
listeners: list[Callable[[str], None]] = []


async def driver(conn: AsyncConnection) -> Any:
    """The asyncpg connection under ``conn`` (in autocommit: SQLAlchemy began nothing)."""
    raw = await conn.get_raw_connection()
    return raw.driver_connection


async def discard(conn: AsyncConnection) -> None:
    """Close a connection for good, never back to the pool: after a statement on it failed or
    was cancelled it may be dead or still busy with that statement (the next user would get
    "another operation is in progress"), and its database session (and its locks) end."""
    with contextlib.suppress(BaseException):
        await conn.invalidate()
    with contextlib.suppress(BaseException):
        await conn.close()


async def checkout(engine: AsyncEngine) -> Any:
    """A connection of the engine's pool (its ``_ConnectionFairy``: ``.driver_connection`` is
    the asyncpg connection), as ``pooled`` checks one out, for a holder that keeps it across
    awaits (a turn's lease); give it back with ``checkin``, or ``discard_checked_out``."""
    return await greenlet_spawn(_connect, engine.sync_engine)


def _connect(engine: Engine) -> Any:
    """``engine.raw_connection()`` (the pool's checkout), a driver error raised as
    ``engine.connect()`` raises it: a SQLAlchemy ``DBAPIError`` (e.g. "the database system is
    starting up" during a restart), which the app answers with 503 ``database_unavailable``,
    not the driver adapter's own ``Error``, which no handler knows."""
    try:
        return engine.raw_connection()
    except engine.dialect.loaded_dbapi.Error as err:
        Connection._handle_dbapi_exception_noconnection(err, engine.dialect, engine)
        raise


def driver_of(fairy: Any) -> Any:
    """The asyncpg connection of a connection from ``checkout``."""
    return fairy.driver_connection


def idle(fairy: Any) -> bool:
    """Whether no transaction is open on a checked-out connection: its return to the pool is
    then plain bookkeeping (nothing for the pool's reset to roll back), done without a
    greenlet or an await by ``checkin``."""
    pg = fairy.driver_connection
    if pg is None or pg.is_closed() or pg.is_in_transaction():
        return False
    # SQLAlchemy's adapter begins its own transactions (none on the raw statements' path)
    return getattr(fairy.dbapi_connection, "_transaction", None) is None


async def checkin(fairy: Any) -> None:
    """Give a checked-out connection back to the pool (its ``checkin`` events as ever); the
    pool's reset rolls back a transaction still open."""
    if idle(fairy):
        fairy._close_special(transaction_reset=True)  # nothing to roll back
    else:
        await greenlet_spawn(fairy.close)


async def discard_checked_out(fairy: Any) -> None:
    """``discard`` for a connection from ``checkout``: closed for good, never pooled again."""
    with contextlib.suppress(BaseException):
        await greenlet_spawn(fairy.invalidate)
    with contextlib.suppress(BaseException):
        await greenlet_spawn(fairy.close)


@contextlib.asynccontextmanager
async def pooled(engine: AsyncEngine) -> AsyncIterator[Any]:
    """A pooled connection's asyncpg connection: back to the pool after the block, discarded
    if the block fails or is cancelled (a statement may still be in progress on it).

    Straight from the engine's pool (its checkout events, e.g. the ping of an idle connection,
    and its reset on return, as ``engine.connect()`` has them), without the ``Connection`` and
    ``AsyncConnection`` wrappers around it, which the raw statements do not use: a checkout
    and return cost ~28 instead of ~44 µs (one greenlet each way instead of two)."""
    fairy = await greenlet_spawn(_connect, engine.sync_engine)
    try:
        yield fairy.driver_connection
    except BaseException:
        with contextlib.suppress(BaseException):
            await greenlet_spawn(fairy.invalidate)
        with contextlib.suppress(BaseException):
            await greenlet_spawn(fairy.close)
        raise
    await checkin(fairy)  # at once, without a greenlet, when no transaction is open


async def on_sqlite(engine: AsyncEngine, fn: Callable[..., T], *args: Any) -> T:
    """``fn(handle, *args)`` on the ``sqlite3`` handle of a connection of the engine's pool: the
    SQLite run store's statements, sent to ``sqlite3`` directly (``fn`` never awaits).

    The checkout, ``fn`` and the return run in one greenlet (an async context manager took
    one each way), and a connection without an open transaction (``sqlite3``'s own
    ``in_transaction``: ``fn`` committed, or only read) goes back without the pool's reset
    ``ROLLBACK``, as SQLAlchemy's ``Connection.close`` returns one whose transaction it
    ended; one left in a transaction (``fn`` raised mid-way, a failed ``COMMIT``) is rolled
    back as before. A checkout and return: 55 instead of 82 Python calls, 15 instead of
    28 µs."""
    return await greenlet_spawn(_on_sqlite, engine.sync_engine.pool, fn, args)


def _on_sqlite(pool: Any, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
    fairy = pool.connect()
    handle = fairy.driver_connection._connection
    try:
        return fn(handle, *args)
    finally:
        if handle.in_transaction:
            fairy.close()  # the pool's reset: ROLLBACK
        else:
            fairy._close_special(transaction_reset=True)  # nothing to roll back


def report(sql: str) -> None:
    for listener in listeners:
        listener(sql)


async def fetchrow(pg: Any, sql: str, *args: Any) -> Any:
    """One statement, its first row (or None)."""
    if listeners:
        report(sql)
    try:
        return await pg.fetchrow(sql, *args)
    except DRIVER_ERRORS as exc:
        raise DriverError(f"{type(exc).__name__}: {exc}") from exc


async def execute(pg: Any, sql: str, *args: Any) -> None:
    """One statement, no rows."""
    if listeners:
        report(sql)
    try:
        await pg.execute(sql, *args)
    except DRIVER_ERRORS as exc:
        raise DriverError(f"{type(exc).__name__}: {exc}") from exc
