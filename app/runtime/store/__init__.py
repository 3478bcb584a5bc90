"""The run store (see ``base.py``): one interface, a SQLite and a PostgreSQL implementation."""

from __future__ import annotations

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.runtime.store.base import (
    Admitted,
    Found,
    NewSession,
    RunEnd,
    RunStore,
    SessionNotFound,
    Started,
)
from app.runtime.store.locks import SessionLocks, TurnLease

__all__ = [
    "Admitted",
    "Found",
    "NewSession",
    "RunEnd",
    "RunStore",
    "SessionLocks",
    "SessionNotFound",
    "Started",
    "TurnLease",
    "create_store",
]


def create_store(engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]) -> RunStore:
    """The run store for ``engine``'s database, chosen once (at start-up)."""
    if engine.dialect.name == "postgresql":
        from app.runtime.store.postgres import PgRunStore

        return PgRunStore(engine, sessionmaker)
    from app.runtime.store.sqlite import SqliteRunStore

    return SqliteRunStore(engine, sessionmaker)
