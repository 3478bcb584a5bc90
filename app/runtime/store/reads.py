"""Read-only database sessions without transaction round trips on PostgreSQL."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker


@asynccontextmanager
async def reading(
    engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]
) -> AsyncIterator[AsyncSession]:
    """A session for reads that need no common snapshot: on PostgreSQL its connection is in
    autocommit (no BEGIN and ROLLBACK round trips around the SELECTs); elsewhere a plain one."""
    if engine.dialect.name != "postgresql":
        async with sessionmaker() as db:
            yield db
        return
    async with engine.connect() as conn:
        # Reset when the connection goes back to the pool.
        await conn.execution_options(isolation_level="AUTOCOMMIT")
        async with AsyncSession(bind=conn, expire_on_commit=False) as db:
            yield db
