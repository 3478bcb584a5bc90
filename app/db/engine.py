"""The async engine and session factory (SQLite with WAL and foreign keys, or PostgreSQL)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.ext.asyncio import AsyncSession as DbSession

from app.db.sqlite_inline import inline_creator

__all__ = ["APPLICATION_PREFIX", "DbSession", "create_engine", "create_sessionmaker"]

# A replica's connections' application_name: this prefix and its id.
APPLICATION_PREFIX = "agentstation:"


def create_engine(
    url: str,
    *,
    pool_size: int = 32,
    max_overflow: int = 8,
    connect_timeout_s: float = 5.0,
    ping_idle_s: float = 1.0,
    clock: Callable[[], float] = time.monotonic,
    replica: str | None = None,
    **kwargs: Any,
) -> AsyncEngine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and enforced foreign keys.

    PostgreSQL gets a pool of ``pool_size`` + ``max_overflow`` connections (each running run
    pins one for its session lock, see app/runtime/store/locks.py) and asyncpg's connect timeout, so
    an unreachable host fails fast (503) instead of after asyncpg's 60 s. A pooled connection
    the server closed is replaced before use, and one idle for ``ping_idle_s`` or longer is
    pinged first (one round trip; ``0``: before every use, SQLAlchemy's ``pool_pre_ping``), so
    a database restart does not fail the requests that follow it.

    ``replica``: a gateway replica's id (app/runtime/liveness.py). Every PostgreSQL connection
    carries it as ``application_name`` (``agentstation:<id>``: how other replicas tell it is
    connected, and which backends to end when it is declared dead) and as the setting
    ``agentstation.replica`` (the default of ``runs.replica``, migration 0010); its backends
    check every second that it is still connected (PostgreSQL 14+).
    """
    if url.startswith("sqlite"):  # statements on the loop's thread: app/db/sqlite_inline.py
        kwargs.setdefault("async_creator", inline_creator(url))
        # The connection used last goes out next: SQLite drops a connection's whole page cache
        # when another connection wrote since its last read, so a FIFO pool under concurrent
        # turns read ~50 pages again per turn (pread64, bench/README.md "SQLite turn"); LIFO
        # keeps reusing the connection that wrote last (~4). Same statements, same commits.
        kwargs.setdefault("pool_use_lifo", True)
    else:
        kwargs.setdefault("pool_pre_ping", ping_idle_s <= 0)
        kwargs.setdefault("pool_size", pool_size)
        kwargs.setdefault("max_overflow", max_overflow)
        kwargs["connect_args"] = {"timeout": connect_timeout_s, **kwargs.get("connect_args", {})}
        if replica is not None:
            kwargs["connect_args"]["server_settings"] = {
                "application_name": f"{APPLICATION_PREFIX}{replica}",
                "agentstation.replica": replica,
                # A backend whose replica died while it waited in a statement (a lock) ends
                # within a second instead of holding what it has until the wait is over.
                "client_connection_check_interval": "1000",
                # A replica whose host vanished (no FIN) loses its connections within ~11 s of
                # silence: then it is dead to the others (``pg_stat_activity``).
                "tcp_keepalives_idle": "5",
                "tcp_keepalives_interval": "2",
                "tcp_keepalives_count": "3",
                **kwargs["connect_args"].get("server_settings", {}),
            }
    engine = create_async_engine(url, **kwargs)
    if url.startswith("sqlite"):
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    elif not kwargs["pool_pre_ping"]:
        _ping_when_idle(engine, ping_idle_s, clock)
    return engine


def _ping_when_idle(engine: AsyncEngine, idle_s: float, clock: Callable[[], float]) -> None:
    """Ping only connections idle for ``idle_s``: ``pool_pre_ping`` cost a round trip per use.

    A connection the server closed (a restart, ``pg_terminate_backend``) is already known closed
    to asyncpg, which reads every socket: it is replaced without a round trip. A connection back
    in the pool moments ago is almost surely alive otherwise, and a busy server reuses them
    within milliseconds. What remains: a connection lost silently (no FIN) within the last
    ``idle_s`` fails its request with 503 ``database_unavailable``, and the pool is renewed.
    """
    dialect = engine.dialect

    def on_checkin(_dbapi_conn: Any, record: Any) -> None:
        record.info["checked_in_at"] = clock()

    def on_checkout(dbapi_conn: Any, record: Any, _proxy: Any) -> None:
        driver = getattr(dbapi_conn, "driver_connection", None)
        if driver is not None and driver.is_closed():
            raise exc.InvalidatePoolError()  # the pool reconnects and renews its older ones
        last = record.info.get("checked_in_at")
        if last is None or clock() - last < idle_s:
            return  # a new connection, or one used moments ago
        try:
            alive = dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as err:
            if not dialect.is_disconnect(err, dbapi_conn, None):
                raise
            alive = False
        if not alive:
            raise exc.InvalidatePoolError()

    event.listen(engine.sync_engine.pool, "checkin", on_checkin)
    event.listen(engine.sync_engine.pool, "checkout", on_checkout)


def _sqlite_pragmas(dbapi_conn: Any, _record: Any) -> None:
    cursor = dbapi_conn.cursor()
    memory = ":memory:" in str(getattr(dbapi_conn, "_database", ""))
    if not memory:
        cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.execute("PRAGMA foreign_keys=ON")
    cursor.execute("PRAGMA busy_timeout=30000")
    cursor.close()


def create_sessionmaker(engine: AsyncEngine) -> async_sessionmaker[DbSession]:
    """Sessions that keep loaded attributes after commit (responses read them)."""
    return async_sessionmaker(engine, expire_on_commit=False)
