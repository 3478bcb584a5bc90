"""Rate limits shared by a fleet: three gateway apps on one PostgreSQL database count as one.

Each app is a full gateway (its own engine, pool and middleware), as three replicas are; the
requests are spread over them concurrently, so the count is exact only if the database does
the counting. On SQLite (one process) the in-process bucket counts as before.
"""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker, create_async_engine

from agents.llms.base import Usage
from app.db.migrate import upgrade
from app.main import create_app
from app.ops.budget_store import set_tenant_budget
from app.ops.ratelimit import RateLimit
from app.ops.shared_limits import FleetLimiter, PgRateLimiter
from app.ops.token_holds import TokenMeter
from app.services.auth import ensure_tenant
from tests.app.conftest import (
    KEY_A,
    KEY_B,
    MODELS,
    make_agent,
    make_session,
    make_settings,
    migrated_pg_database,
)
from tests.lifespan import LifespanManager


class FrozenClock:
    """One clock for the three apps: no refill while the test runs, whatever its speed."""

    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def _fleet(
    url: str,
    rate: str,
    n: int,
    clock: FrozenClock | None,
    stack: AsyncExitStack,
    **settings: Any,
) -> list[FastAPI]:
    apps = []
    for _ in range(n):
        app = create_app(
            make_settings(url, rate_limit=rate, db_pool_size=8, db_max_overflow=2, **settings)
        )
        limiter = app.state.ops.limiter
        assert isinstance(limiter, FleetLimiter)
        limiter.clock = clock
        await stack.enter_async_context(LifespanManager(app))
        apps.append(app)
    return apps


async def _clients(apps: list[FastAPI], key: str, stack: AsyncExitStack) -> list[httpx.AsyncClient]:
    return [
        await stack.enter_async_context(
            httpx.AsyncClient(
                transport=httpx.ASGITransport(app=app),
                base_url=f"http://replica{i}",
                headers={"Authorization": f"Bearer {key}"},
            )
        )
        for i, app in enumerate(apps)
    ]


@pytest.fixture
async def pg_url() -> AsyncIterator[str]:
    async with migrated_pg_database() as url:
        yield url


async def _burst(clients: list[httpx.AsyncClient], n: int) -> list[httpx.Response]:
    """``n`` concurrent requests, round robin over the replicas."""
    cycle = itertools.cycle(clients)
    return list(await asyncio.gather(*(next(cycle).get("/v1/agents") for _ in range(n))))


@pytest.mark.postgres
async def test_sixty_a_minute_over_three_replicas_admits_sixty(pg_url: str) -> None:
    clock = FrozenClock()
    async with AsyncExitStack() as stack:
        apps = await _fleet(pg_url, "60/minute", 3, clock, stack)
        assert all(isinstance(a.state.ops.limiter.shared, PgRateLimiter) for a in apps)
        a = await _clients(apps, KEY_A, stack)
        b = await _clients(apps, KEY_B, stack)
        answers = await _burst(a, 120)
        other = await _burst(b, 3)  # another key has its own count
        again = await _burst(a, 6)  # refused at once (each replica knows the key is blocked)
        clock.now += 1.0  # one request's worth refills
        after = await _burst(a, 3)
    statuses = [r.status_code for r in answers]
    assert statuses.count(200) == 60
    assert statuses.count(429) == 60
    per_replica = [sum(r.status_code == 200 for r in answers[i::3]) for i in range(3)]
    assert sum(per_replica) == 60 and all(n > 0 for n in per_replica)
    for r in answers:
        if r.status_code == 429:
            assert r.json()["error"]["code"] == "rate_limit_exceeded"
            assert r.headers["retry-after"] == "1"
    assert [r.status_code for r in other] == [200, 200, 200]
    assert {r.status_code for r in again} == {429}
    assert sorted(r.status_code for r in after) == [200, 429, 429]


@pytest.mark.postgres
async def test_database_clock_counts_across_replicas(pg_url: str) -> None:
    # The production path: the database's clock. 60/hour refills one request a minute, so
    # the few seconds this test takes cannot change the count.
    async with AsyncExitStack() as stack:
        apps = await _fleet(pg_url, "60/hour", 3, None, stack)
        a = await _clients(apps, KEY_A, stack)
        answers = await _burst(a, 90)
    statuses = [r.status_code for r in answers]
    assert statuses.count(200) == 60 and statuses.count(429) == 30
    waits = {int(r.headers["retry-after"]) for r in answers if r.status_code == 429}
    assert all(1 <= w <= 60 for w in waits)


async def test_sqlite_counts_in_process(tmp_path: Path) -> None:
    url = f"sqlite+aiosqlite:///{tmp_path}/t.db"
    await asyncio.to_thread(upgrade, url)
    clock = FrozenClock()
    async with AsyncExitStack() as stack:
        apps = await _fleet(url, "5/minute", 1, clock, stack)
        limiter = apps[0].state.ops.limiter
        assert limiter.shared is None
        (a,) = await _clients(apps, KEY_A, stack)
        statuses = [(await a.get("/v1/agents")).status_code for _ in range(7)]
    assert statuses == [200] * 5 + [429] * 2


@pytest.mark.postgres
async def test_tenant_token_budget_is_one_count_for_the_fleet(pg_url: str) -> None:
    # A tenant's budget and its usage are one row in the database: whichever replica a
    # request reaches, it sees the tokens the others charged, and the request after the one
    # that spends the budget is refused everywhere.
    engine = create_async_engine(pg_url)
    async with AsyncSession(engine) as db, db.begin():
        await ensure_tenant(db, "a")
        await set_tenant_budget(db, "a", 40)
    await engine.dispose()
    chat = {"model": "poet", "messages": [{"role": "user", "content": "a poem please"}]}
    async with AsyncExitStack() as stack:
        apps = await _fleet(pg_url, "1000/minute", 3, None, stack)
        clients = await _clients(apps, KEY_A, stack)
        answers = []
        for i in range(12):  # round robin, one after the other
            answers.append(await clients[i % 3].post("/v1/chat/completions", json=chat))
    used = [r.json()["usage"]["total_tokens"] for r in answers if r.status_code == 200]
    per_request = used[0]
    assert set(used) == {per_request}
    admitted = -(-40 // per_request)  # admitted while the count is under the budget
    assert [r.status_code for r in answers] == [200] * admitted + [429] * (12 - admitted)
    refused = answers[admitted:]
    assert {r.json()["error"]["code"] for r in refused} == {"budget_exceeded"}
    assert len({str(r.request.url.host) for r in refused}) == 3  # every replica refuses


# One model call a turn, long enough (8 words, 20 ms apart) for the turns' calls to overlap.
STEADY = {
    "name": "steady",
    "backend": "scripted",
    "replies": ["one two three four five six seven eight"],
    "cycle": "model",
    "chunk_delay_s": 0.02,
}


async def _tenant_counts(url: str) -> tuple[int, int, int, int]:
    """(tokens_used, tokens_held, holds left, tokens of every run) of tenant ``a``."""
    engine = create_async_engine(url)
    try:
        async with engine.connect() as conn:
            used, held = (
                await conn.execute(
                    sa.text("SELECT tokens_used, tokens_held FROM tenants WHERE id = 'a'")
                )
            ).one()
            holds = await conn.scalar(sa.text("SELECT count(*) FROM token_holds"))
            runs = await conn.scalar(
                sa.text(
                    "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM runs "
                    "WHERE tenant_id = 'a'"
                )
            )
    finally:
        await engine.dispose()
    return int(used), int(held), int(holds or 0), int(runs or 0)


@pytest.mark.postgres
async def test_concurrent_turns_on_three_replicas_do_not_overspend_a_tenant_budget(
    pg_url: str,
) -> None:
    # 12 sessions send a turn at once, spread over three replicas; each turn's one model call
    # uses ~14 tokens and the tenant may spend 60. Each replica read "0 used" at admission, so
    # counting at the runs' end let all 12 spend (~170 tokens); reserved call by call in the
    # database, calls start only while the fleet's count has room, and the count is exact.
    budget = 60
    engine = create_async_engine(pg_url)
    async with AsyncSession(engine) as db, db.begin():
        await ensure_tenant(db, "a")
        await set_tenant_budget(db, "a", budget)
    await engine.dispose()
    models = json.dumps([*MODELS, STEADY])
    async with AsyncExitStack() as stack:
        apps = await _fleet(pg_url, "1000/minute", 3, None, stack, models=models)
        clients = await _clients(apps, KEY_A, stack)
        await make_agent(clients[0], "counter", model="steady")
        sessions = [await make_session(clients[i % 3], "counter") for i in range(12)]
        answers = await asyncio.gather(
            *(
                clients[i % 3].post(f"/v1/sessions/{sid}/messages", json={"message": "count"})
                for i, sid in enumerate(sessions)
            )
        )
    ran = [r.json()["run"] for r in answers if r.status_code == 200]
    refused = [r for r in answers if r.status_code != 200]
    assert all(r.status_code == 429 for r in refused), [r.text for r in refused]
    assert {r.json()["error"]["code"] for r in refused} <= {"budget_exceeded"}
    spent = [run for run in ran if run["usage"]["total_tokens"] > 0]
    stopped = [run for run in ran if run["stop_reason"] == "budget_exceeded"]
    per_call = max(run["usage"]["total_tokens"] for run in spent)
    assert all(run["usage"]["total_tokens"] == 0 for run in stopped)  # refused before calling
    assert len(spent) <= budget // per_call + 1 and len(refused) + len(stopped) > 0
    used, held, holds, runs = await _tenant_counts(pg_url)
    assert used == runs == sum(run["usage"]["total_tokens"] for run in ran)  # counted once
    assert held == 0 and holds == 0  # every hold given back
    # Every call started while the fleet's count was under the budget: at most the last one
    # crossed it (as on a single replica).
    assert used - per_call < budget <= used


@pytest.mark.postgres
async def test_a_dead_replicas_token_holds_are_given_back(pg_url: str) -> None:
    engine = create_async_engine(pg_url)
    async with AsyncSession(engine) as db, db.begin():
        await ensure_tenant(db, "a")
        await set_tenant_budget(db, "a", 1000)
    sessions = async_sessionmaker(engine)
    try:
        gone = TokenMeter(sessions, "gone-replica")
        hold = await gone.reserve("a", 700)
        assert (await _tenant_counts(pg_url))[1:3] == (700, 1)
        # A call that does not fit next to the dead replica's hold waits for it ...
        waiting = asyncio.create_task(TokenMeter(sessions, "live").reserve("a", 400))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        # ... until a live replica gives the holds of replicas without a row back.
        assert await TokenMeter(sessions, "live").release_unowned() == 1
        second = await asyncio.wait_for(waiting, 10)
        assert (await _tenant_counts(pg_url))[1:3] == (400, 1)
        # The dead call's tokens, if it ever reports them, still count (its hold is gone).
        await gone.settle(hold, Usage(prompt_tokens=30, completion_tokens=20))
        await TokenMeter(sessions, "live").settle(second, Usage(100, 0))
        assert (await _tenant_counts(pg_url))[:3] == (150, 0, 0)
    finally:
        await engine.dispose()


async def test_an_unreachable_database_falls_back_to_counting_per_replica() -> None:
    # A raw-model request needs no database: a database outage must not fail it at the limiter.
    engine = create_async_engine(
        "postgresql+asyncpg://postgres@127.0.0.1:9/none", connect_args={"timeout": 2}
    )
    limiter = PgRateLimiter(RateLimit.parse("2/minute"), engine)
    try:
        waits = [await limiter.admit("key:k") for _ in range(3)]
    finally:
        await engine.dispose()
    assert waits[:2] == [0.0, 0.0] and waits[2] > 0
