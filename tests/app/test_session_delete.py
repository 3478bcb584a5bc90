"""DELETE /v1/sessions/{id} commits before the session's kernel stops.

Stopping a kernel takes a moment (~0.25 s in the sandbox). The delete used to stay an open
write transaction across it: on SQLite, whose statements run on the loop's thread, any other
write in that window blocked the loop in SQLite's busy wait, the stop could not go on, and both
waited out ``busy_timeout`` (30 s): the playground's Delete hung for 30 s (a CI flake of
tests/app/test_playground_fixes.py). A kernel pool whose stop waits for the test shows it.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import create_async_engine

from tests.app.conftest import make_agent, make_session


class HeldStop:
    """A kernel pool whose ``shutdown_session`` waits until the test lets it end."""

    def __init__(self) -> None:
        self.entered = asyncio.Event()
        self.release = asyncio.Event()
        self.stopped: list[str] = []

    def prestart(self, session_key: str, agent: str) -> None:
        """Nothing to start ahead."""

    async def shutdown_session(self, session_key: str, remove_files: bool = False) -> None:
        self.entered.set()
        await self.release.wait()
        self.stopped.append(session_key)


async def test_the_delete_is_committed_before_the_kernel_stops(
    app: FastAPI, client: httpx.AsyncClient, database_url: str
) -> None:
    state: Any = app.state.agentstation
    pool, before = HeldStop(), state.kernel_pool
    state.kernel_pool = pool
    try:
        await _delete_while_the_kernel_stops(client, database_url, pool)
    finally:
        pool.release.set()
        state.kernel_pool = before


async def _delete_while_the_kernel_stops(
    client: httpx.AsyncClient, database_url: str, pool: HeldStop
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    deleting = asyncio.create_task(client.delete(f"/v1/sessions/{sid}"))
    await asyncio.wait_for(pool.entered.wait(), 10)

    # While the kernel stops, the session is already gone for everyone else...
    other = create_async_engine(database_url)
    try:
        async with other.connect() as conn:
            left = await conn.scalar(
                sa.text("SELECT count(*) FROM sessions WHERE id = :id"), {"id": sid}
            )
    finally:
        await other.dispose()
    assert left == 0
    # ...and other writes go on (before: on SQLite, 30 s, then "database is locked").
    made = await asyncio.wait_for(client.post("/v1/sessions", json={"agent": "helper"}), 10)
    assert made.status_code == 201, made.text

    pool.release.set()
    answer = await asyncio.wait_for(deleting, 10)
    assert answer.status_code == 204
    assert pool.stopped == [f"a:{sid}"]
    assert (await client.get(f"/v1/sessions/{sid}")).status_code == 404
