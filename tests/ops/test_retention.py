"""Retention sweep: idle finished sessions go with their memory/runs/events; old event logs go."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.base import Base, utcnow
from app.db.engine import create_engine, create_sessionmaker
from app.db.models import Agent, Message, Run, RunEvent, Session, Tenant
from app.ops.retention import RetentionPolicy, RetentionSweeper, sweep

NOW = datetime(2026, 11, 22, 12, 0, tzinfo=utcnow().tzinfo)
DAY = timedelta(days=1)
PG_URL = os.environ.get("AGENTSTATION_TEST_DATABASE_URL")


@pytest.fixture(
    params=[
        "sqlite",
        pytest.param("postgres", marks=pytest.mark.postgres),
    ]
)
async def engine(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[AsyncEngine]:
    if request.param == "sqlite":
        eng = create_engine(f"sqlite+aiosqlite:///{tmp_path / 'ret.db'}")
        async with eng.begin() as conn:
            await conn.run_sync(Base.metadata.create_all)
        yield eng
        await eng.dispose()
        return
    if not PG_URL:
        pytest.fail("AGENTSTATION_TEST_DATABASE_URL is not set (run with -m 'not postgres')")
    # A private schema: other suites use the same database concurrently.
    schema = f"ops_retention_{uuid.uuid4().hex[:8]}"
    admin = create_engine(PG_URL)
    async with admin.begin() as conn:
        await conn.execute(sa.text(f'CREATE SCHEMA "{schema}"'))
    eng = create_engine(PG_URL, connect_args={"server_settings": {"search_path": schema}})
    async with eng.begin() as conn:
        await conn.run_sync(Base.metadata.create_all)
    try:
        yield eng
    finally:
        await eng.dispose()
        async with admin.begin() as conn:
            await conn.execute(sa.text(f'DROP SCHEMA "{schema}" CASCADE'))
        await admin.dispose()


@pytest.fixture
async def factory(engine: AsyncEngine) -> async_sessionmaker[AsyncSession]:
    return create_sessionmaker(engine)


async def add_session(
    db: AsyncSession,
    sid: str,
    updated_at: datetime,
    runs: Sequence[tuple[str, datetime | None]] = (),
) -> None:
    """A session of tenant t1 with one memory message and runs (status, finished_at)."""
    db.add(
        Session(
            pk=f"pk_{sid}",
            tenant_id="t1",
            id=sid,
            agent_id="ag1",
            agent_version=1,
            created_at=updated_at,
            updated_at=updated_at,
        )
    )
    await db.flush()  # no ORM relationships: flush parents before children
    db.add(Message(session_pk=f"pk_{sid}", key="memory", index=0, data={"content": "hi"}))
    for i, (status, finished_at) in enumerate(runs):
        run_id = f"run_{sid}_{i}"
        started = (finished_at or updated_at) - timedelta(seconds=5)
        db.add(
            Run(
                id=run_id,
                tenant_id="t1",
                session_pk=f"pk_{sid}",
                session_id=sid,
                agent="a",
                agent_version=1,
                status=status,
                input={},
                created_at=started,
                started_at=started,
                finished_at=finished_at,
                prompt_tokens=3,
            )
        )
        await db.flush()
        for seq in (1, 2):
            db.add(RunEvent(run_id=run_id, seq=seq, type="message", data={}, created_at=started))


@pytest.fixture
async def seeded(factory: async_sessionmaker[AsyncSession]) -> None:
    async with factory() as db, db.begin():
        db.add(Tenant(id="t1"))
        await db.flush()
        db.add(Agent(id="ag1", tenant_id="t1", name="a", spec={}))
        await db.flush()
        await add_session(db, "old", NOW - 40 * DAY, [("completed", NOW - 40 * DAY)])
        await add_session(db, "old-empty", NOW - 40 * DAY)
        # Updated long ago but used recently through a run: not idle.
        await add_session(db, "recent-run", NOW - 40 * DAY, [("completed", NOW - 2 * DAY)])
        # Idle for long, but a run still waits: never deleted under a client.
        await add_session(db, "old-queued", NOW - 40 * DAY, [("queued", None)])
        await add_session(db, "fresh", NOW - DAY, [("failed", NOW - DAY)])


async def count(factory: async_sessionmaker[AsyncSession], model: type[Base]) -> int:
    async with factory() as db:
        return int(await db.scalar(sa.select(sa.func.count()).select_from(model)) or 0)


async def session_ids(factory: async_sessionmaker[AsyncSession]) -> set[str]:
    async with factory() as db:
        return set((await db.scalars(sa.select(Session.id))).all())


async def test_idle_sessions_are_deleted_with_memory_runs_and_events(
    factory: async_sessionmaker[AsyncSession], seeded: None
) -> None:
    freed: list[tuple[str, str]] = []

    async def on_deleted(tenant_id: str, session_id: str) -> None:
        freed.append((tenant_id, session_id))

    policy = RetentionPolicy(session_ttl_s=30 * DAY.total_seconds(), batch_size=1)
    result = await sweep(factory, policy, now=NOW, on_session_deleted=on_deleted)
    assert result.sessions == 2 and result.run_events == 0
    assert await session_ids(factory) == {"recent-run", "old-queued", "fresh"}
    assert sorted(freed) == [("t1", "old"), ("t1", "old-empty")]
    # Cascade: nothing of the deleted sessions is left behind.
    assert await count(factory, Message) == 3
    assert await count(factory, Run) == 3
    assert await count(factory, RunEvent) == 6
    # A second sweep finds nothing more.
    assert (await sweep(factory, policy, now=NOW, on_session_deleted=on_deleted)).sessions == 0


async def test_old_event_logs_are_deleted_but_runs_and_memory_stay(
    factory: async_sessionmaker[AsyncSession], seeded: None
) -> None:
    policy = RetentionPolicy(run_events_ttl_s=7 * DAY.total_seconds(), batch_size=1)
    result = await sweep(factory, policy, now=NOW)
    assert result == type(result)(sessions=0, run_events=2)
    async with factory() as db:
        with_events = set((await db.scalars(sa.select(RunEvent.run_id).distinct())).all())
        runs = (await db.scalars(sa.select(Run))).all()
    # Only the run that finished 40 days ago lost its log; the queued run's log stays.
    assert with_events == {"run_recent-run_0", "run_old-queued_0", "run_fresh_0"}
    assert len(runs) == 4 and all(r.prompt_tokens == 3 for r in runs)
    assert await count(factory, Message) == 5


async def test_zero_ttls_keep_everything_and_the_sweeper_does_not_start(
    factory: async_sessionmaker[AsyncSession], seeded: None
) -> None:
    policy = RetentionPolicy()
    assert not policy.enabled
    assert await sweep(factory, policy, now=NOW) == type(await sweep(factory, policy))()
    sweeper = RetentionSweeper(factory, policy)
    sweeper.start()
    assert sweeper._task is None
    await sweeper.aclose()
    assert await count(factory, Session) == 5


async def test_the_background_sweeper_deletes_expired_sessions(
    factory: async_sessionmaker[AsyncSession], seeded: None
) -> None:
    # TTL relative to the real clock: the seeded "old" rows are 40 days before NOW (in 2026).
    age = utcnow() - (NOW - 30 * DAY)
    policy = RetentionPolicy(session_ttl_s=age.total_seconds(), interval_s=3600)
    sweeper = RetentionSweeper(factory, policy)
    sweeper.start()
    try:
        for _ in range(200):
            if "old" not in await session_ids(factory):
                break
            await asyncio.sleep(0.01)
    finally:
        await sweeper.aclose()
    assert await session_ids(factory) == {"recent-run", "old-queued", "fresh"}
