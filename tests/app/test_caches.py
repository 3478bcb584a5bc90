"""Per-replica caches of the chat path: keys, agents by name, tenant budgets; SQL per request."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import create_async_engine

from app.cache import TTLCache, invalidate
from app.db.base import utcnow
from app.db.models import Agent, ApiKey, Tenant
from app.main import create_app
from app.ops.budget_store import set_tenant_budget
from app.ops.tenant_usage import TenantUsage
from app.services.agent_directory import KIND as AGENTS_KIND
from app.services.auth import create_key
from app.settings import Settings
from app.state import AppState
from tests.app.conftest import make_agent
from tests.lifespan import LifespanManager

CHAT = {"model": "echo", "messages": [{"role": "user", "content": "one two three"}]}


class Clock:
    """A clock the test moves by hand (no sleeping)."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def state_of(app: FastAPI) -> AppState:
    state: AppState = app.state.agentstation
    return state


@contextmanager
def statements(app: FastAPI) -> Iterator[list[str]]:
    """The SQL statements the app's engine executes inside the block."""
    seen: list[str] = []

    def record(_c: Any, _cur: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    engine = state_of(app).engine.sync_engine
    event.listen(engine, "before_cursor_execute", record)
    try:
        yield seen
    finally:
        event.remove(engine, "before_cursor_execute", record)


@asynccontextmanager
async def started(settings: Settings, key: str | None = "key-tenant-a") -> AsyncIterator[Any]:
    """(app, client) of a started app; ``key`` None: no Authorization header."""
    app = create_app(settings)
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    async with LifespanManager(app):
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as client:
            yield app, client


async def db_query(url: str, stmt: Any) -> Any:
    engine = create_async_engine(url)
    try:
        async with engine.begin() as conn:
            return (await conn.execute(stmt)).first()
    finally:
        await engine.dispose()


# --- TTLCache ---------------------------------------------------------------------------


def test_ttl_cache_expires_bounds_and_can_be_disabled() -> None:
    clock = Clock()
    cache: TTLCache[str, int] = TTLCache("test", 5.0, 2, clock)
    cache.put("a", 1)
    clock.now += 4.9
    assert cache.get("a") == 1
    clock.now += 0.1
    assert cache.get("a") is None  # expired
    cache.put("a", 1)
    cache.put("b", 2)
    cache.get("a")  # a is now the most recently used
    cache.put("c", 3)
    assert (cache.get("a"), cache.get("b"), cache.get("c")) == (1, None, 3)
    off: TTLCache[str, int] = TTLCache("test", 0, 10, clock)
    off.put("a", 1)
    assert off.get("a") is None


# --- SQL statements per request -----------------------------------------------------------


async def test_raw_model_agent_and_models_requests_run_no_sql_once_cached(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", model="echo")
    chat_agent = {**CHAT, "model": "helper"}
    for body in (CHAT, chat_agent):  # warm: the tenant's agents and "no budget" are read once
        assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    with statements(app) as seen:
        raw = await client.post("/v1/chat/completions", json=CHAT)
        agent = await client.post("/v1/chat/completions", json=chat_agent)
        models = await client.get("/v1/models")
        one = await client.get("/v1/models/helper")
    assert [r.status_code for r in (raw, agent, models, one)] == [200] * 4
    assert agent.json()["choices"][0]["message"]["content"] == "one two three"
    assert seen == []


async def test_anonymous_requests_run_no_sql_once_no_key_is_known(
    settings_factory: Callable[..., Settings],
) -> None:
    async with started(settings_factory(api_keys=""), key=None) as (app, client):
        assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        with statements(app) as seen:
            assert (await client.post("/v1/chat/completions", json=CHAT)).status_code == 200
        assert seen == []


async def test_a_tenant_with_a_budget_is_read_and_charged_per_model_call(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", model="echo")
    async with state_of(app).sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", 1000)
    assert (await client.post("/v1/chat/completions", json={**CHAT, "model": "helper"})).is_success
    with statements(app) as seen:
        resp = await client.post("/v1/chat/completions", json={**CHAT, "model": "helper"})
    assert resp.status_code == 200
    # The tenant's figures (the 429 up front), then its one model call reserved (the tenant
    # row locked, the hold added and recorded) and settled (the hold dropped, the tokens
    # counted): exact over a fleet (app/ops/token_holds.py).
    assert [" ".join(s.split()[:2]) for s in seen] == [
        "SELECT tenants.token_budget,",
        "SELECT tenants.token_budget,",
        "UPDATE tenants",
        "INSERT INTO",
        "DELETE FROM",
        "UPDATE tenants",
    ]


# --- agents by name -----------------------------------------------------------------------


async def test_agent_changes_on_this_replica_apply_to_chat_at_once(
    client: httpx.AsyncClient,
) -> None:
    # A raw model's name, cached as "not an agent" by the first request.
    first = await client.post("/v1/chat/completions", json={**CHAT, "model": "poet"})
    assert first.json()["choices"][0]["message"]["content"] == "Roses are red."
    await make_agent(client, "poet", model="echo")  # now the name means the agent
    agent = await client.post("/v1/chat/completions", json={**CHAT, "model": "poet"})
    assert agent.json()["choices"][0]["message"]["content"] == "one two three"
    put = await client.put("/v1/agents/poet", json={"spec": {"kind": "agent", "model": "slow"}})
    assert put.status_code == 200
    slow = await client.post("/v1/chat/completions", json={**CHAT, "model": "poet"})
    assert slow.json()["choices"][0]["message"]["content"].startswith("one two three four")
    await make_agent(client, "helper", model="echo")
    assert (await client.post("/v1/chat/completions", json={**CHAT, "model": "helper"})).is_success
    assert (await client.delete("/v1/agents/helper")).status_code == 204
    gone = await client.post("/v1/chat/completions", json={**CHAT, "model": "helper"})
    assert gone.status_code == 404
    assert (await client.get("/v1/models/helper")).status_code == 404
    ids = [m["id"] for m in (await client.get("/v1/models")).json()["data"]]
    assert "helper" not in ids and ids.count("poet") == 2  # the agent and the raw model


async def test_agents_are_cached_per_tenant(
    client: httpx.AsyncClient, client_b: httpx.AsyncClient
) -> None:
    await make_agent(client, "mine", model="echo")
    assert (await client.post("/v1/chat/completions", json={**CHAT, "model": "mine"})).is_success
    other = await client_b.post("/v1/chat/completions", json={**CHAT, "model": "mine"})
    assert other.status_code == 404


async def test_another_replica_sees_a_new_agent_within_the_ttl(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    clock = Clock()
    state_of(app).agents.cache.clock = clock
    body = {**CHAT, "model": "later"}
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 404
    # What another replica's POST /v1/agents writes (this process is not told).
    now = utcnow()
    await db_query(
        state_of(app).settings.database_url,
        sa.insert(Agent)
        .values(id="agent_x", tenant_id="a", name="later", version=1, created_at=now,
                updated_at=now, spec={"kind": "agent", "model": "echo"})
        .returning(Agent.id),
    )  # fmt: skip
    stale = await client.post("/v1/chat/completions", json=body)
    assert stale.status_code == 404  # cached "no such agent"
    clock.now += state_of(app).settings.agent_cache_ttl_s
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200


async def test_concurrent_misses_of_a_tenants_agents_share_one_query(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", model="echo")  # drops the tenant's cached agents
    body = {**CHAT, "model": "helper"}
    with statements(app) as seen:
        answers = await asyncio.gather(
            *(client.post("/v1/chat/completions", json=body) for _ in range(8))
        )
    assert [a.json()["choices"][0]["message"]["content"] for a in answers] == ["one two three"] * 8
    assert sum("FROM agents" in s for s in seen) == 1


async def test_a_change_during_a_shared_agents_query_is_not_hidden_by_it(app: FastAPI) -> None:
    state = state_of(app)
    directory = state.agents
    read = directory._read
    gates: list[asyncio.Event] = []

    async def slow_read(sessions: Any, tenant_id: str) -> Any:
        gates.append(gate := asyncio.Event())
        await gate.wait()
        return await read(sessions, tenant_id)

    async def settle() -> None:
        for _ in range(5):  # the caller's task, then the query's own
            await asyncio.sleep(0)

    directory._read = slow_read  # type: ignore[method-assign]
    first = asyncio.create_task(directory.agents(state.sessionmaker, "a"))
    await settle()
    assert len(gates) == 1
    invalidate(AGENTS_KIND, "a")  # an agent changed while that query ran
    second = asyncio.create_task(directory.agents(state.sessionmaker, "a"))
    await settle()
    assert len(gates) == 2  # a query of its own, not the one that may predate the change
    gates[1].set()
    fresh = await second
    gates[0].set()
    await first  # the older read ends last, and is not cached over the fresh one
    assert directory.cache.get("a") is fresh


# --- API keys -----------------------------------------------------------------------------


async def test_a_stored_key_is_looked_up_once_per_ttl_and_revocation_applies_after_it(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory()
    async with started(settings) as (app, _):
        async with state_of(app).sessionmaker() as db, db.begin():
            key = await create_key(db, "team")
    async with started(settings, key=key) as (app, client):
        clock = Clock()
        state_of(app).auth.keys.clock = clock
        assert (await client.get("/v1/models")).status_code == 200
        with statements(app) as seen:
            assert (await client.get("/v1/models")).status_code == 200
        assert seen == []
        await db_query(
            settings.database_url,
            sa.update(ApiKey).values(revoked_at=utcnow()).returning(ApiKey.id),
        )
        assert (await client.get("/v1/models")).status_code == 200  # until the TTL passed
        clock.now += settings.auth_cache_ttl_s
        assert (await client.get("/v1/models")).status_code == 401


async def test_concurrent_misses_share_one_key_query(
    settings_factory: Callable[..., Settings],
) -> None:
    """When a cached key (or "no stored key yet") expires under load, the requests that miss
    it together run one query, not one each."""
    settings = settings_factory()
    async with started(settings) as (app, _):
        async with state_of(app).sessionmaker() as db, db.begin():
            key = await create_key(db, "team")
    async with started(settings, key=key) as (app, client):
        with statements(app) as seen:
            answers = await asyncio.gather(*(client.get("/v1/models") for _ in range(16)))
        assert {r.status_code for r in answers} == {200}
        assert sum("api_keys" in s for s in seen) == 1, seen
    async with started(settings_factory(api_keys=""), key=None) as (app, client):
        with statements(app) as seen:
            answers = await asyncio.gather(*(client.get("/v1/models") for _ in range(16)))
        assert {r.status_code for r in answers} == {401}  # a stored key exists: no anonymity
        assert sum("api_keys" in s for s in seen) == 1, seen


async def test_unknown_keys_cannot_grow_the_key_cache_without_bound(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    auth = state_of(app).auth
    for i in range(1100):
        resp = await client.get("/v1/models", headers={"Authorization": f"Bearer wrong-{i}"})
        assert resp.status_code == 401
    assert len(auth.unknown) == 1024 and len(auth.keys) == 0
    with statements(app) as seen:  # a repeated unknown key is answered from the cache
        resp = await client.get("/v1/models", headers={"Authorization": "Bearer wrong-1099"})
    assert resp.status_code == 401 and seen == []


async def test_a_key_made_by_another_process_ends_anonymous_access_within_the_ttl(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(api_keys="")
    async with started(settings, key=None) as (app, client):
        clock = Clock()
        state_of(app).auth.stored.clock = clock
        assert (await client.get("/v1/models")).status_code == 200
        await db_query(  # what `agentstation keys create` in another process writes
            settings.database_url,
            sa.insert(ApiKey)
            .values(id="key_x", tenant_id="default", key_hash="0" * 64, prefix="as-x")
            .returning(ApiKey.id),
        )
        assert (await client.get("/v1/models")).status_code == 200
        clock.now += settings.auth_cache_ttl_s
        assert (await client.get("/v1/models")).status_code == 401


# --- tenant budgets and usage -------------------------------------------------------------


async def test_unlimited_tenant_usage_is_written_by_the_flush_and_at_shutdown(
    settings_factory: Callable[..., Settings],
) -> None:
    settings = settings_factory(usage_flush_s=3600)  # only explicit flushes and the shutdown
    async with started(settings) as (app, client):
        await make_agent(client, "helper", model="echo")
        body = {**CHAT, "model": "helper"}
        first = (await client.post("/v1/chat/completions", json=body)).json()["usage"]
        await state_of(app).tenant_usage.flush()
        row = await db_query(settings.database_url, sa.select(Tenant.tokens_used).where(
            Tenant.id == "a"))  # fmt: skip
        assert row.tokens_used == first["total_tokens"] > 0
        second = (await client.post("/v1/chat/completions", json=body)).json()["usage"]
    row = await db_query(settings.database_url, sa.select(Tenant.tokens_used).where(
        Tenant.id == "a"))  # fmt: skip
    assert row.tokens_used == first["total_tokens"] + second["total_tokens"]


async def test_a_failed_flush_keeps_the_counts_for_the_next_one(
    app: FastAPI,
) -> None:
    def broken() -> Any:
        raise ConnectionError("database down")

    usage = TenantUsage(broken, flush_s=3600)  # type: ignore[arg-type]
    await usage.charge("a", 5, limited=False)
    await usage.charge("a", 2, limited=False)
    with pytest.raises(ConnectionError):
        await usage.flush()
    assert usage.pending == {"a": 7}
    usage.sessions = state_of(app).sessionmaker
    await usage.aclose()
    assert usage.pending == {}
    async with state_of(app).sessionmaker() as db:
        assert await db.scalar(sa.select(Tenant.tokens_used).where(Tenant.id == "a")) == 7


async def test_a_budget_set_in_process_applies_at_once_and_from_elsewhere_within_the_ttl(
    app: FastAPI, client: httpx.AsyncClient, settings_factory: Callable[..., Settings]
) -> None:
    await make_agent(client, "helper", model="echo")
    body = {**CHAT, "model": "helper"}
    state = state_of(app)
    clock = Clock()
    state.tenant_usage.unlimited.clock = clock
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    # Another process (the CLI) gives tenant a a spent budget: not seen before the TTL.
    await db_query(
        state.settings.database_url,
        sa.update(Tenant).where(Tenant.id == "a").values(token_budget=1).returning(Tenant.id),
    )
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    clock.now += state.settings.tenant_budget_ttl_s
    spent = await client.post("/v1/chat/completions", json=body)
    assert spent.status_code == 429 and spent.json()["error"]["code"] == "budget_exceeded"
    # Set through this process, a change applies at once.
    async with state.sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", None)
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 200
    async with state.sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", 1)
    assert (await client.post("/v1/chat/completions", json=body)).status_code == 429
