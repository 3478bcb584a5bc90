"""Alembic environment: async engine, the app's metadata, type comparison on."""

from __future__ import annotations

import asyncio

from alembic import context
from sqlalchemy.engine import Connection

from app.db import models
from app.db.base import Base
from app.db.engine import create_engine
from app.settings import Settings

config = context.config
target_metadata = Base.metadata
assert models.Run.__tablename__ in target_metadata.tables  # the tables are registered


def _url() -> str:
    url = config.attributes.get("url") or config.get_main_option("sqlalchemy.url")
    return str(url) if url else Settings().database_url


def _configure(connection: Connection | None = None, url: str | None = None) -> None:
    context.configure(
        connection=connection,
        url=url,
        target_metadata=target_metadata,
        compare_type=True,
        render_as_batch=(url or str(connection.engine.url if connection else "")).startswith(
            "sqlite"
        ),
        literal_binds=connection is None,
    )


def run_migrations_offline() -> None:
    """Emit SQL without a database connection."""
    _configure(url=_url())
    with context.begin_transaction():
        context.run_migrations()


def _run_sync(connection: Connection) -> None:
    _configure(connection=connection)
    with context.begin_transaction():
        context.run_migrations()


async def run_migrations_online() -> None:
    """Apply migrations over an async connection."""
    connection = config.attributes.get("connection")
    if connection is not None:
        await connection.run_sync(_run_sync)
        return
    engine = create_engine(_url())
    async with engine.connect() as conn:
        await conn.run_sync(_run_sync)
        await conn.commit()
    await engine.dispose()


if context.is_offline_mode():
    run_migrations_offline()
else:
    asyncio.run(run_migrations_online())
