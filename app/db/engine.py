"""The async engine and session factory (SQLite with WAL and foreign keys, or PostgreSQL)."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, async_sessionmaker, create_async_engine
from sqlalchemy.ext.asyncio import AsyncSession as DbSession

__all__ = ["DbSession", "create_engine", "create_sessionmaker"]


def create_engine(
    url: str,
    *,
    pool_size: int = 20,
    max_overflow: int = 20,
    connect_timeout_s: float = 5.0,
    **kwargs: Any,
) -> AsyncEngine:
    """An engine for ``url``; SQLite gets WAL, a busy timeout and enforced foreign keys.

    PostgreSQL gets a pool of ``pool_size`` + ``max_overflow`` connections (each running run
    pins one for its session lock, see app/runtime/locks.py) and asyncpg's connect timeout, so
    an unreachable host fails fast (503) instead of after asyncpg's 60 s.
    """
    if url.startswith("sqlite"):
        kwargs.setdefault("connect_args", {"timeout": 30})
    else:
        kwargs.setdefault("pool_pre_ping", True)
        kwargs.setdefault("pool_size", pool_size)
        kwargs.setdefault("max_overflow", max_overflow)
        kwargs["connect_args"] = {"timeout": connect_timeout_s, **kwargs.get("connect_args", {})}
    engine = create_async_engine(url, **kwargs)
    if url.startswith("sqlite"):
        event.listen(engine.sync_engine, "connect", _sqlite_pragmas)
    return engine


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
