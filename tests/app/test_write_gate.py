"""``WriteGate``: one write transaction at a time on SQLite, released on any exit; open on
PostgreSQL."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from app.db.engine import create_engine
from app.runtime.store.writes import WriteGate


async def test_sqlite_holders_take_turns_and_an_error_releases(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'db.sqlite'}")
    gate = WriteGate(engine)
    order: list[str] = []
    inside = asyncio.Event()
    leave = asyncio.Event()

    async def first() -> None:
        async with gate.hold():
            order.append("first in")
            inside.set()
            await leave.wait()
            order.append("first out")

    async def second() -> None:
        await inside.wait()
        async with gate.hold():
            order.append("second in")

    tasks = [asyncio.create_task(first()), asyncio.create_task(second())]
    await inside.wait()
    await asyncio.sleep(0.01)
    assert order == ["first in"]  # the second waits for the first
    leave.set()
    await asyncio.gather(*tasks)
    assert order == ["first in", "first out", "second in"]

    with pytest.raises(RuntimeError):
        async with gate.hold():
            raise RuntimeError("mid-transaction")
    async with asyncio.timeout(1):  # released by the error
        async with gate.hold():
            pass
    await engine.dispose()


async def test_elsewhere_the_gate_is_open() -> None:
    engine: Any = SimpleNamespace(dialect=SimpleNamespace(name="postgresql"))
    gate = WriteGate(engine)
    async with asyncio.timeout(1), gate.hold(), gate.hold():  # nested: nothing to wait for
        pass
