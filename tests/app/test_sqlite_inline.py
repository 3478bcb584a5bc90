"""SQLite statements run on the event loop's thread (app/db/sqlite_inline.py)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import sqlalchemy as sa

from app.db.engine import create_engine


async def test_statements_run_without_worker_threads(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'inline.db'}")
    before = threading.active_count()
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE t (n INTEGER)"))

        async def write(n: int) -> None:
            async with engine.begin() as conn:
                await conn.execute(sa.text("INSERT INTO t VALUES (:n)"), {"n": n})

        await asyncio.gather(*(write(n) for n in range(50)))
        async with engine.connect() as conn:
            total = await conn.scalar(sa.text("SELECT sum(n) FROM t"))
            mode = await conn.scalar(sa.text("PRAGMA journal_mode"))
        assert total == sum(range(50))
        assert mode == "wal"  # the engine's pragmas still apply
        assert threading.active_count() == before  # no aiosqlite worker thread per connection
    finally:
        await engine.dispose()


async def test_a_failed_statement_rolls_back_and_the_connection_is_reused(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'inline.db'}")
    try:
        async with engine.begin() as conn:
            await conn.execute(sa.text("CREATE TABLE u (k TEXT PRIMARY KEY)"))
            await conn.execute(sa.text("INSERT INTO u VALUES ('a')"))
        try:
            async with engine.begin() as conn:
                await conn.execute(sa.text("INSERT INTO u VALUES ('b')"))
                await conn.execute(sa.text("INSERT INTO u VALUES ('a')"))
        except sa.exc.IntegrityError:
            pass
        async with engine.connect() as conn:
            assert (await conn.scalars(sa.text("SELECT k FROM u"))).all() == ["a"]
    finally:
        await engine.dispose()
