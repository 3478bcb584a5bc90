"""Alembic: upgrade head works and the models match the migrations (no autogenerate drift)."""

from __future__ import annotations

import asyncio
from typing import Any

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.engine import Connection

from app.db import models
from app.db.base import Base
from app.db.engine import create_engine
from app.db.migrate import alembic_config


def _head(url: str) -> str | None:
    return ScriptDirectory.from_config(alembic_config(url)).get_current_head()


def _diff(conn: Connection) -> list[Any]:
    context = MigrationContext.configure(conn, opts={"compare_type": True})
    assert "runs" in Base.metadata.tables and models.Run.__tablename__ == "runs"
    return list(compare_metadata(context, Base.metadata))


async def test_upgrade_head_has_no_drift(database_url: str) -> None:
    # database_url is already migrated to head by the fixture (alembic upgrade head).
    engine = create_engine(database_url)
    try:
        async with engine.connect() as conn:
            assert await conn.run_sync(_diff) == []
            version = (
                await conn.exec_driver_sql("SELECT version_num FROM alembic_version")
            ).scalar()
            assert version == _head(database_url)
    finally:
        await engine.dispose()


async def test_upgrade_is_idempotent(database_url: str) -> None:
    from app.db.migrate import upgrade

    await asyncio.to_thread(upgrade, database_url)
