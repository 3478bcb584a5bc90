"""PostgreSQL pool: connections idle for ``ping_idle_s`` are pinged before use, busy ones not."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from app.db.engine import create_engine
from tests.app.conftest import PG_URL
from tests.app.test_caches import Clock

pytestmark = pytest.mark.postgres


@pytest.fixture
async def pinged() -> AsyncIterator[tuple[AsyncEngine, Clock, list[int]]]:
    """An engine pinging connections idle for 30 s on a hand-moved clock; its ping count."""
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (deselect with -m 'not postgres')")
    clock, pings = Clock(), [0]
    engine = create_engine(PG_URL, pool_size=1, max_overflow=0, ping_idle_s=30, clock=clock)
    ping = engine.dialect.do_ping

    def counting(conn: Any) -> bool:
        pings[0] += 1
        return ping(conn)

    engine.dialect.do_ping = counting  # type: ignore[method-assign]
    try:
        yield engine, clock, pings
    finally:
        await engine.dispose()


async def backend_pid(engine: AsyncEngine) -> int:
    async with engine.connect() as conn:
        return int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))


async def terminate(pid: int) -> None:
    """Kill one server connection, as a database restart or an idle timeout would."""
    assert PG_URL is not None
    admin = create_async_engine(PG_URL)
    try:
        async with admin.connect() as conn:
            await conn.execute(sa.text("SELECT pg_terminate_backend(:pid)"), {"pid": pid})
    finally:
        await admin.dispose()


async def test_a_connection_reused_at_once_is_not_pinged(
    pinged: tuple[AsyncEngine, Clock, list[int]],
) -> None:
    engine, clock, pings = pinged
    first = await backend_pid(engine)
    clock.now += 29
    assert await backend_pid(engine) == first  # the same pooled connection, no round trip
    assert pings == [0]


async def test_an_idle_connection_is_pinged_once_and_replaced_if_the_ping_fails(
    pinged: tuple[AsyncEngine, Clock, list[int]],
) -> None:
    engine, clock, pings = pinged
    first = await backend_pid(engine)
    clock.now += 30
    assert await backend_pid(engine) == first  # alive: pinged, then used
    assert pings == [1]
    clock.now += 30
    ping = engine.dialect.do_ping
    engine.dialect.do_ping = lambda conn: bool(ping(conn)) and False  # type: ignore[method-assign]
    assert await backend_pid(engine) != first  # "dead" (lost silently): a new connection
    assert pings == [2]


async def test_a_connection_the_server_closed_is_replaced_without_a_round_trip(
    pinged: tuple[AsyncEngine, Clock, list[int]],
) -> None:
    engine, _, pings = pinged
    async with engine.connect() as conn:
        first = int(await conn.scalar(sa.text("SELECT pg_backend_pid()")))
        driver = (await conn.get_raw_connection()).driver_connection
    await terminate(first)
    for _ in range(500):  # until asyncpg read the server's goodbye (it reads every socket)
        if driver.is_closed():
            break
        await asyncio.sleep(0.01)
    assert await backend_pid(engine) != first  # used moments ago, yet not used dead
    assert pings == [0]


async def test_the_urls_ssl_parameter_reaches_asyncpg() -> None:
    """docs/deploy.md, "TLS to the database": ``?ssl=disable`` turns asyncpg's TLS off (the
    test server offers none: ``require`` is refused, which shows the parameter is used)."""
    assert PG_URL
    off = create_engine(PG_URL + "?ssl=disable", pool_size=1, max_overflow=0)
    try:
        async with off.connect() as conn:
            ssl = await conn.scalar(
                sa.text("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
            )
        assert ssl is False
    finally:
        await off.dispose()
    required = create_engine(PG_URL + "?ssl=require", pool_size=1, max_overflow=0)
    try:
        with pytest.raises(Exception, match="SSL"):
            async with required.connect():
                pass
    finally:
        await required.dispose()
