"""A turn's ``TurnLease`` from the request's side (PostgreSQL): the lookup and the admission run on
its connection, and however the request's ``async with store.lease()`` block ends — a refused
lookup, a refused admission, a cancelled statement, a run handed to its task, a task cancelled
before its first step — the session's run lock is free or held by the right owner, every run
slot comes back, and a connection that may be busy or locked never returns to the pool.

The run's side of the lease (its end, error, cancel, lost connection) is tests/app/test_run_hold.py.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine
from sqlalchemy.pool import NullPool

from app.errors import SessionBusy
from app.main import create_app
from app.runtime.runs import RunManager
from app.runtime.store import SessionNotFound
from app.runtime.store.locks import advisory_key, run_slots
from app.services.turns import TurnRequest, prepare_submission
from app.state import AppState
from tests.app.conftest import (
    KEY_A,
    make_agent,
    make_session,
    make_settings,
    migrated_pg_database,
)
from tests.app.test_run_hold import _free
from tests.lifespan import LifespanManager

pytestmark = pytest.mark.postgres


@pytest.fixture
async def database_url() -> AsyncIterator[str]:
    """A fresh, migrated PostgreSQL database (the lease holds nothing on SQLite)."""
    async with migrated_pg_database() as url:
        yield url


class Turns:
    """The started app, its state, and the asyncpg connections its pool took back."""

    def __init__(self, app: FastAPI, client: httpx.AsyncClient) -> None:
        self.app = app
        self.client = client
        self.state: AppState = app.state.agentstation
        self.runs: RunManager = self.state.run_manager
        self.returned: list[Any] = []

        def on_checkin(dbapi_conn: Any, _record: Any) -> None:
            if dbapi_conn is not None:  # None: invalidated (discarded)
                self.returned.append(dbapi_conn.driver_connection)

        event.listen(self.state.engine.sync_engine.pool, "checkin", on_checkin)

    async def settled(self) -> None:
        """Background returns done; every run slot free."""
        await self.runs.locks.drain()
        assert self.runs.locks._slots._value == run_slots(self.state.engine)


@pytest.fixture
async def turns(database_url: str) -> AsyncIterator[Turns]:
    app = create_app(make_settings(database_url))
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://test", headers=headers
        ) as client:
            yield Turns(app, client)


@pytest.fixture
async def other(database_url: str) -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine(database_url, poolclass=NullPool)
    try:
        yield engine
    finally:
        await engine.dispose()


async def _session_pk(turns: Turns, session_id: str) -> str:
    async with turns.state.engine.connect() as conn:
        pk = await conn.scalar(
            sa.text("SELECT pk FROM sessions WHERE id = :id"), {"id": session_id}
        )
    assert pk is not None
    return str(pk)


async def test_a_refused_lookup_returns_its_connection(turns: Turns) -> None:
    store = turns.runs.store
    with pytest.raises(SessionNotFound):
        async with store.lease() as lease:
            await store.lookup(lease, "a", "no-such-session")
    pg = lease.pg
    await turns.settled()
    assert pg in turns.returned and lease.conn is None


async def test_a_refused_admission_returns_its_connection_and_slot(
    turns: Turns, other: AsyncEngine
) -> None:
    # Another replica runs the session: its run row is running and it holds the run lock.
    await make_agent(turns.client)
    sid = await make_session(turns.client)
    pk = await _session_pk(turns, sid)
    async with other.connect() as replica:
        await replica.execute(
            sa.text(
                "INSERT INTO runs (id, tenant_id, session_pk, session_id, agent, agent_version,"
                " status, input, options, prompt_tokens, completion_tokens, created_at)"
                " VALUES ('run_elsewhere', 'a', :pk, :sid, 'helper', 1, 'running', '{}', '{}',"
                " 0, 0, now())"
            ),
            {"pk": pk, "sid": sid},
        )
        assert await replica.scalar(sa.select(sa.func.pg_try_advisory_lock(advisory_key(pk))))
        await replica.commit()
        with pytest.raises(SessionBusy):
            async with turns.runs.store.lease() as lease:
                sub = await prepare_submission(turns.state, lease, "a", sid, TurnRequest("x"))
                await turns.runs.submit(sub, lease)
        await turns.settled()
        assert lease.conn is None and not lease.slot
        assert not await _free(other, pk)  # still the other replica's
        await replica.scalar(sa.select(sa.func.pg_advisory_unlock(advisory_key(pk))))
        await replica.commit()


async def test_a_statement_cancelled_on_the_lease_discards_its_connection(turns: Turns) -> None:
    store = turns.runs.store
    started = asyncio.Event()
    seen: list[Any] = []

    async def request() -> None:
        async with store.lease() as lease, lease.using() as pg:
            seen.append(pg)
            started.set()
            await pg.execute("SELECT pg_sleep(30)")

    task = asyncio.create_task(request())
    await started.wait()
    await asyncio.sleep(0.1)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await turns.settled()
    assert seen[0] not in turns.returned  # it may still be running the statement


async def test_an_admitted_run_takes_the_lease_and_frees_the_session_at_its_end(
    turns: Turns, other: AsyncEngine
) -> None:
    await make_agent(turns.client, model="slow")
    sid = await make_session(turns.client)
    pk = await _session_pk(turns, sid)
    async with turns.runs.store.lease() as lease:
        sub = await prepare_submission(turns.state, lease, "a", sid, TurnRequest("x"))
        run, created = await turns.runs.submit(sub, lease)
        assert created
    # The request's block is over; the run's task holds the lock (it took the lease).
    assert lease.conn is None and not lease.slot
    assert not await _free(other, pk)
    await turns.runs.wait(run.id)
    job = turns.runs.jobs.get(run.id)
    if job is not None and job.task is not None:
        await asyncio.wait([job.task])
    await turns.settled()
    assert await _free(other, pk)


async def test_a_run_cancelled_before_its_first_step_ends_and_lets_its_lease_go(
    turns: Turns, other: AsyncEngine
) -> None:
    # Cancelled (a client's cancel, an interrupt, shutdown) before its task took a step: the
    # run still ends, stored as cancelled, and the lock its admission took is let go.
    await make_agent(turns.client, model="slow")
    sid = await make_session(turns.client)
    pk = await _session_pk(turns, sid)
    async with turns.runs.store.lease() as lease:
        sub = await prepare_submission(turns.state, lease, "a", sid, TurnRequest("x"))
        run, _ = await turns.runs.submit(sub, lease)
        job = turns.runs.jobs[run.id]
        await turns.runs.cancel(run.id)
    await turns.settled()
    assert job.lease.conn is None and not job.lease.slot
    assert await _free(other, pk)
    stored = (await turns.client.get(f"/v1/runs/{run.id}")).json()
    assert stored["status"] == "cancelled" and stored["stop_reason"] == "cancelled"
