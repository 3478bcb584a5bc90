"""The database pool is configurable on PostgreSQL; connecting gives up after a timeout."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable

import pytest
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db.engine import create_engine
from app.errors import database_unavailable
from app.main import create_app
from app.runtime.store.locks import run_slots
from app.settings import Settings
from tests.lifespan import LifespanManager


def _pool(engine: AsyncEngine) -> tuple[int, int] | None:
    """(size, max overflow) of a queue pool; None for SQLite's unbounded pools."""
    pool = engine.sync_engine.pool
    if not hasattr(pool, "size"):
        return None
    return int(pool.size()), int(pool._max_overflow)  # type: ignore[attr-defined]


async def test_pool_size_comes_from_the_settings(
    settings_factory: Callable[..., Settings], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("AGENTSTATION_DB_POOL_SIZE", "7")
    monkeypatch.setenv("AGENTSTATION_DB_MAX_OVERFLOW", "3")
    settings = settings_factory()
    app = create_app(settings)
    async with LifespanManager(app):
        engine = app.state.agentstation.engine
        if settings.is_sqlite:
            assert _pool(engine) != (7, 3)  # SQLite keeps SQLAlchemy's own pool
        else:
            assert _pool(engine) == (7, 3)


def test_postgres_defaults_are_larger_than_sqlalchemys() -> None:
    # 40 connections at most, 32 kept open: as many as the run slots (each running run holds
    # one), so a 32-session load does not open and close overflow connections on every turn.
    settings = Settings(database_url="postgresql+asyncpg://u@127.0.0.1/x")
    assert (settings.db_pool_size, settings.db_max_overflow) == (32, 8)
    assert settings.db_connect_timeout_s == 5.0
    engine = create_engine(settings.database_url)
    assert _pool(engine) == (32, 8)
    assert run_slots(engine) == 32


async def test_a_silent_database_host_fails_within_the_connect_timeout() -> None:
    # A listener that never answers: the TCP connect succeeds, PostgreSQL's startup never does.
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()
        port = silent.getsockname()[1]
        engine = create_engine(
            f"postgresql+asyncpg://postgres@127.0.0.1:{port}/x", connect_timeout_s=0.5
        )
        began = time.monotonic()
        try:
            with pytest.raises(TimeoutError) as caught:
                async with engine.connect():
                    pass
        finally:
            await engine.dispose()
    assert time.monotonic() - began < 5
    assert database_unavailable(caught.value)


async def test_every_asyncpg_error_of_a_raw_statement_is_a_database_error() -> None:
    # Found by the PostgreSQL restart test: a connection the server had just terminated raised
    # asyncpg's InternalClientError ("another operation is in progress"), which is not a
    # PostgresError: it escaped the 503 handler and the client's connection was reset.
    import asyncpg

    from app.db import raw

    class Dead:
        async def fetchrow(self, sql: str, *args: object) -> None:
            raise asyncpg.InternalClientError("cannot switch to state 12; another operation (2)")

        async def execute(self, sql: str, *args: object) -> None:
            raise asyncpg.exceptions.ConnectionDoesNotExistError("connection was closed")

    with pytest.raises(raw.DriverError) as fetched:
        await raw.fetchrow(Dead(), "SELECT 1")
    assert database_unavailable(fetched.value)
    with pytest.raises(raw.DriverError) as executed:
        await raw.execute(Dead(), "SELECT 1")
    assert database_unavailable(executed.value)
