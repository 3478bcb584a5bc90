"""What a session turn costs the database, and the in-process memory it keeps between turns."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
import sqlalchemy as sa
from fastapi import FastAPI
from sqlalchemy import event
from sqlalchemy.ext.asyncio import AsyncEngine

from app.db import raw
from app.db.models import Run
from app.main import create_app
from app.ops.budget_store import set_tenant_budget, tenant_budget
from app.runtime.runs import run_public
from app.runtime.store.locks import advisory_key
from app.schemas.sessions import RunPublic
from app.settings import Settings
from tests.app.conftest import (
    KEY_A,
    make_agent,
    make_session,
    parse_sse,
)
from tests.lifespan import LifespanManager

# A turn of an idle session, answered as JSON: (statements, explicit transactions). Before the
# fixes: 18 statements in 8 (SQLite) or 9 (PostgreSQL) transactions; then 7 in 3 (SQLite) and
# 8 in 3 (PostgreSQL). On PostgreSQL now 3 statements sent straight to asyncpg, each in autocommit
# (its own implicit transaction): lookup, admission (agentstation_admit, which takes the
# session's run lock) and the run's end (one statement with CTEs, which also releases the run
# lock at its commit; it was a 4th statement). Since the session's lookup is kept between turns
# (a tenant and agent without budgets, app/services/turns.py: _look_up), a session's later turns
# need no lookup: 6 statements in 2 transactions on SQLite, 2 statements on PostgreSQL.
TURN_COST = {"sqlite": (6, 2), "postgresql": (2, 0)}


@dataclass
class Counter:
    statements: list[str] = field(default_factory=list)
    transactions: int = 0


@contextmanager
def counting(engine: AsyncEngine) -> Iterator[Counter]:
    """Every SQL statement and transaction the engine runs inside the block."""
    counter = Counter()

    def on_execute(_c: Any, _cur: Any, statement: str, *_args: Any) -> None:
        counter.statements.append(statement)

    def on_begin(_c: Any) -> None:
        counter.transactions += 1

    def on_raw(statement: str) -> None:
        if statement.startswith("BEGIN"):  # a transaction of the SQLite run store's own
            counter.transactions += 1
        else:
            counter.statements.append(statement)

    sync = engine.sync_engine
    event.listen(sync, "before_cursor_execute", on_execute)
    event.listen(sync, "begin", on_begin)
    raw.listeners.append(on_raw)  # statements sent straight to asyncpg or sqlite3
    try:
        yield counter
    finally:
        event.remove(sync, "before_cursor_execute", on_execute)
        event.remove(sync, "begin", on_begin)
        raw.listeners.remove(on_raw)


def engine_of(app: FastAPI) -> AsyncEngine:
    engine: AsyncEngine = app.state.agentstation.engine
    return engine


async def turn(
    client: httpx.AsyncClient, sid: str, message: str = "hello", strategy: str = "reject"
) -> dict[str, Any]:
    body = {"message": message, "multitask_strategy": strategy}
    resp = await client.post(f"/v1/sessions/{sid}/messages", json=body)
    assert resp.status_code == 200, resp.text
    data: dict[str, Any] = resp.json()
    assert data["run"]["status"] == "completed", data
    return data


async def memory(client: httpx.AsyncClient, sid: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = (await client.get(f"/v1/sessions/{sid}/memory")).json()["memory"]
    return items


async def settle(app: FastAPI) -> None:
    """Until this app has no run in progress (runs outlive the request by a few steps) and
    their connections are back in the pool (returned after the answer)."""
    runs = app.state.agentstation.runs
    for _ in range(500):
        if not runs.jobs and not runs.locks.returning:
            return
        await asyncio.sleep(0.01)
    raise AssertionError("a run never finished")


@pytest.fixture
async def quiet_app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    """An app whose batched tenant usage is not flushed while a test counts statements."""
    application = create_app(settings_factory(usage_flush_s=3600))
    async with LifespanManager(application):
        yield application


async def test_a_turn_costs_few_statements_and_transactions(quiet_app: FastAPI) -> None:
    app = quiet_app
    transport = httpx.ASGITransport(app=app)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        await _count_a_turn(app, c)


async def _count_a_turn(app: FastAPI, client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    await turn(client, sid, "warm up")  # the memory of the session is now kept in process
    await settle(app)
    engine = engine_of(app)
    with counting(engine) as counter:
        await turn(client, sid)
        await settle(app)
    statements, transactions = TURN_COST[engine.dialect.name]
    assert len(counter.statements) <= statements, counter.statements
    assert counter.transactions <= transactions
    # The turn's writes (messages, events, run status) are stored by one statement on PostgreSQL.
    if engine.dialect.name == "postgresql":
        ends = [s for s in counter.statements if "INSERT INTO messages" in s]
        assert len(ends) == 1 and "INSERT INTO run_events" in ends[0], counter.statements
    # Nothing is read back: not the history, not the finished run.
    assert not any("FROM messages" in s for s in counter.statements)
    assert not any(s.lstrip().startswith("SELECT runs.") for s in counter.statements)


async def test_the_first_turn_of_a_new_session_reads_nothing(quiet_app: FastAPI) -> None:
    # A session created here is kept for its turns (its tenant is known to have no budget),
    # and a session whose memory revision is 0 has no messages to read: its first turn is
    # the admission and the end (PostgreSQL), with no lookup and no read of its memory.
    transport = httpx.ASGITransport(app=quiet_app)
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(transport=transport, base_url="http://t", headers=headers) as c:
        await make_agent(c)
        await turn(c, await make_session(c), "warm up")  # the tenant is known unlimited now
        sid = await make_session(c)
        await settle(quiet_app)
        engine = engine_of(quiet_app)
        with counting(engine) as counter:
            reply = await turn(c, sid, "hello")
            await settle(quiet_app)
        statements, transactions = TURN_COST[engine.dialect.name]
        assert len(counter.statements) <= statements, counter.statements
        assert counter.transactions <= transactions
        assert not any("FROM messages" in s for s in counter.statements)
        assert not any("FROM sessions" in s and "JOIN agents" in s for s in counter.statements)
        users = [m["content"] for m in await memory(c, sid) if m["sender"] == "user"]
        assert users == ["hello"] and reply


async def test_long_history_is_not_reloaded_and_only_new_messages_are_written(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    history = [{"content": f"m{i}", "sender": "user"} for i in range(300)]
    assert (await client.put(f"/v1/sessions/{sid}/memory", json={"memory": history})).is_success
    await turn(client, sid, "first")  # loads the 300 stored messages once
    await settle(app)
    with counting(engine_of(app)) as counter:
        await turn(client, sid, "second")
        await settle(app)
    assert not any("FROM messages" in s for s in counter.statements)
    inserts = [s for s in counter.statements if "INSERT INTO messages" in s]
    assert len(inserts) == 1  # the turn's two new messages, in one statement
    stored = await memory(client, sid)
    assert [m["content"] for m in stored[:300]] == [f"m{i}" for i in range(300)]
    assert [m["content"] for m in stored[300:] if m["sender"] == "user"] == ["first", "second"]
    assert len(stored) == 304


async def test_replaced_memory_is_kept_for_the_next_turn(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """PUT /memory keeps what it stored, at its new revision, once its transaction commits:
    the next turn reads no history; a PUT that fails keeps nothing."""
    await make_agent(client)
    sid = await make_session(client)
    senders = ("user", "helper")  # not merged into one user turn: one word each
    history = [{"content": f"m{i}", "sender": senders[i % 2]} for i in range(50)]
    assert (await client.put(f"/v1/sessions/{sid}/memory", json={"memory": history})).is_success
    with counting(engine_of(app)) as counter:
        data = await turn(client, sid, "first")
        await settle(app)
    assert not any("FROM messages" in s for s in counter.statements), counter.statements
    assert data["run"]["usage"]["prompt_tokens"] == 50 + 1  # "m0" … "m49" and "first"
    bad = await client.put(f"/v1/sessions/{sid}/memory", json={"memory": [{"x": 1}]})
    assert bad.status_code == 422
    stored = await memory(client, sid)
    assert [m["content"] for m in stored[:50]] == [f"m{i}" for i in range(50)]
    assert len(stored) == 52


async def test_replacing_the_memory_is_seen_by_the_next_turn(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sid = await make_session(client)
    # The scripted model counts the prompt's words: the history the turn saw.
    fresh_prompt = (await turn(client, sid, "before"))["run"]["usage"]["prompt_tokens"]
    replaced = {"memory": [{"content": f"only {i}", "sender": "user"} for i in range(3)]}
    assert (await client.put(f"/v1/sessions/{sid}/memory", json=replaced)).is_success
    await turn(client, sid, "after")
    contents = [m["content"] for m in await memory(client, sid)]
    assert contents[:4] == ["only 0", "only 1", "only 2", "after"] and len(contents) == 5
    assert (await client.post(f"/v1/sessions/{sid}/reset")).is_success
    again = await turn(client, sid, "before")
    assert again["run"]["usage"]["prompt_tokens"] == fresh_prompt
    assert [m["content"] for m in await memory(client, sid)] == ["before", "before"]


async def test_an_idle_session_runs_at_once_and_a_busy_one_queues(
    client: httpx.AsyncClient,
) -> None:
    await make_agent(client, model="slow")
    sid = await make_session(client)
    first = asyncio.create_task(turn(client, sid, "one"))
    for _ in range(500):
        runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
        if runs:
            break
        await asyncio.sleep(0.01)
    assert runs[0]["status"] == "running" and runs[0]["started_at"] is not None
    queued = {"message": "two", "stream": True, "multitask_strategy": "enqueue"}
    events = parse_sse((await client.post(f"/v1/sessions/{sid}/messages", json=queued)).text)
    assert events[0]["event"] == "run.created"
    assert events[0]["data"]["run"]["status"] == "queued"
    assert events[-1]["event"] == "run.completed"
    assert events[-1]["data"]["run"]["started_at"] is not None
    one = (await first)["run"]
    log = parse_sse((await client.get(f"/v1/runs/{one['id']}/events")).text)
    assert log[0]["data"]["run"]["status"] == "running"
    assert log[-1]["data"]["run"]["finished_at"] <= events[-1]["data"]["run"]["started_at"]
    contents = [m["content"] for m in await memory(client, sid) if m["sender"] == "user"]
    assert contents == ["one", "two"]


async def test_concurrent_turns_on_many_sessions_all_complete(client: httpx.AsyncClient) -> None:
    await make_agent(client)
    sids = [await make_session(client) for _ in range(12)]
    turns = (turn(client, sid, f"to {sid}", "enqueue") for sid in sids for _ in range(2))
    await asyncio.gather(*turns)
    for sid in sids:
        users = [m["content"] for m in await memory(client, sid) if m["sender"] == "user"]
        assert users == [f"to {sid}"] * 2


@pytest.mark.postgres
async def test_a_write_on_another_replica_invalidates_the_kept_memory(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    one, two = replicas
    await make_agent(one)
    sid = await make_session(one)
    await turn(one, sid, "a")  # replica one keeps the memory [a, reply]
    await turn(two, sid, "b")  # replica two appends [b, reply]
    await turn(one, sid, "c")  # must see b: a stale copy would write over indexes 2 and 3
    users = [m["content"] for m in await memory(one, sid) if m["sender"] == "user"]
    assert users == ["a", "b", "c"]
    replaced = {"memory": [{"content": "z", "sender": "user"}]}
    assert (await two.put(f"/v1/sessions/{sid}/memory", json=replaced)).is_success
    await turn(one, sid, "d")
    users = [m["content"] for m in await memory(two, sid) if m["sender"] == "user"]
    assert users == ["z", "d"]


@pytest.mark.postgres
async def test_a_session_deleted_and_created_again_elsewhere_still_takes_turns(
    replicas: tuple[httpx.AsyncClient, httpx.AsyncClient],
) -> None:
    # Replica one keeps what its turns read of the session; replica two deletes the session
    # and creates another with the same id (and another agent): replica one's next turn runs
    # on the new session and its agent, not the kept one, and not a 404.
    one, two = replicas
    await make_agent(one)
    await make_agent(one, name="poet", model="poet")
    sid = await make_session(one)
    await turn(one, sid, "a")
    assert (await two.delete(f"/v1/sessions/{sid}")).status_code == 204
    assert (await one.get(f"/v1/sessions/{sid}")).status_code == 404
    await make_session(two, agent="poet", id=sid)
    resp = await one.post(f"/v1/sessions/{sid}/messages", json={"message": "b"})
    assert resp.status_code == 200, resp.text
    assert resp.json()["run"]["agent"] == "poet"
    assert resp.json()["message"]["content"] == "Roses are red."
    users = [m["content"] for m in await memory(two, sid) if m["sender"] == "user"]
    assert users == ["b"]
    # Deleted on replica one itself: its next turn is a 404 at once.
    assert (await one.delete(f"/v1/sessions/{sid}")).status_code == 204
    resp = await one.post(f"/v1/sessions/{sid}/messages", json={"message": "c"})
    assert resp.status_code == 404, resp.text


async def tokens_used(app: FastAPI, tenant: str) -> int:
    state = app.state.agentstation
    async with state.sessionmaker() as db:
        return (await tenant_budget(db, tenant))[1]


async def test_tenant_usage_is_batched_without_a_budget_and_stored_with_one(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client)
    sid = await make_session(client)
    state = app.state.agentstation
    await state.tenant_usage.flush()
    before = await tokens_used(app, "a")
    spent = (await turn(client, sid))["run"]["usage"]["total_tokens"]
    await settle(app)
    assert spent > 0
    await state.tenant_usage.flush()  # the batched count of an unlimited tenant is written
    assert await tokens_used(app, "a") == before + spent
    async with state.sessionmaker() as db, db.begin():
        await set_tenant_budget(db, "a", 1_000_000)
    more = (await turn(client, sid))["run"]["usage"]["total_tokens"]
    # With a budget, the run's own final transaction charged it: nothing waits in memory.
    assert state.tenant_usage.pending.get("a", 0) == 0
    assert await tokens_used(app, "a") == before + spent + more


# Statements go straight to asyncpg on PostgreSQL only: no SQLite variant.
@pytest.mark.parametrize(
    "database_url", [pytest.param("postgres", marks=pytest.mark.postgres)], indirect=True
)
async def test_a_raw_statement_on_a_lost_connection_is_a_503_and_leaks_nothing(
    app: FastAPI, client: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert engine_of(app).dialect.name == "postgresql"
    import asyncpg

    await make_agent(client)
    sid = await make_session(client)
    real = raw.driver_of  # the turn lease's asyncpg connection

    class Lost:
        def __init__(self, pg: Any) -> None:
            self.pg = pg

        async def fetchrow(self, *_: Any) -> Any:
            raise asyncpg.ConnectionDoesNotExistError("connection was closed in the middle")

    def lost_driver(conn: Any) -> Any:
        return Lost(real(conn))

    monkeypatch.setattr(raw, "driver_of", lost_driver)
    resp = await client.post(f"/v1/sessions/{sid}/messages", json={"message": "hi"})
    assert resp.status_code == 503 and resp.json()["error"]["code"] == "database_unavailable"
    monkeypatch.setattr(raw, "driver_of", real)
    await turn(client, sid)  # the session is free: nothing held by the failed request
    pool = engine_of(app).sync_engine.pool
    await settle(app)
    assert pool.checkedout() == 0  # type: ignore[attr-defined]


async def test_the_session_is_free_when_the_answer_comes(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    """The run lock is released by the end's own commit: nothing is left to do after the
    answer, and the next turn is admitted at once (``running``, not ``queued``)."""
    await make_agent(client)
    sid = await make_session(client)
    for i in range(3):
        await turn(client, sid, f"turn {i}")
        assert not app.state.agentstation.runs.jobs  # nothing of the run outlives its answer
        engine = engine_of(app)
        if engine.dialect.name == "postgresql":
            async with engine.connect() as conn:
                row = await conn.exec_driver_sql("SELECT pk FROM sessions WHERE id = $1", (sid,))
                key = advisory_key(str(row.scalar_one()))
                free = await conn.exec_driver_sql("SELECT pg_try_advisory_lock($1)", (key,))
                assert free.scalar_one() is True
                await conn.exec_driver_sql("SELECT pg_advisory_unlock($1)", (key,))
                await conn.commit()
    runs = (await client.get(f"/v1/sessions/{sid}/runs")).json()["data"]
    assert [r["status"] for r in runs] == ["completed"] * 3


async def test_run_public_is_what_the_schema_dumps(client: httpx.AsyncClient, app: FastAPI) -> None:
    """``run_public`` builds the API shape directly: the same dict as ``RunPublic``'s JSON dump,
    for a run kept in memory and for the same run read back."""
    await make_agent(client)
    sid = await make_session(client)
    data = await turn(client, sid, "hello")
    state = app.state.agentstation
    async with state.sessionmaker() as db:
        stored = await db.get(Run, data["run"]["id"])
    assert stored is not None
    for run in (stored, state.runs.finished[data["run"]["id"]]):
        assert run_public(run) == RunPublic.model_validate(run_public(run)).model_dump(mode="json")
        expected = RunPublic(
            id=run.id,
            session_id=run.session_id,
            agent=run.agent,
            status=run.status,
            stop_reason=run.stop_reason,
            input=run.input,
            output=run.output,
            error=run.error,
            usage={
                "prompt_tokens": run.prompt_tokens,
                "completion_tokens": run.completion_tokens,
                "total_tokens": run.prompt_tokens + run.completion_tokens,
            },
            created_at=run.created_at,
            started_at=run.started_at,
            finished_at=run.finished_at,
        ).model_dump(mode="json")
        assert run_public(run) == expected
    assert data["run"] == run_public(stored)


def lookups(counter: Counter) -> list[str]:
    """The session lookups (``LOOKUP`` on PostgreSQL, the SQLAlchemy query on SQLite)."""
    return [s for s in counter.statements if "FROM sessions" in s and "JOIN agents" in s]


async def test_a_session_turned_often_is_not_looked_up_again(
    settings_factory: Callable[..., Settings],
) -> None:
    # A kept session's entry expired ``session_cache_ttl_s`` after it was stored: a session
    # turned every second or so (the persistence bench) was looked up every other turn. Each
    # turn's admission now confirms it (still at its agent and version): kept while in use.
    ttl = 1.0
    application = create_app(settings_factory(usage_flush_s=3600, session_cache_ttl_s=ttl))
    async with LifespanManager(application):
        transport = httpx.ASGITransport(app=application)
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers
        ) as c:
            await make_agent(c)
            sid = await make_session(c)
            await turn(c, sid, "warm up")
            loop = asyncio.get_running_loop()
            start = loop.time()
            with counting(engine_of(application)) as counter:
                while loop.time() - start < 2.5 * ttl:  # well past the entry's life
                    await asyncio.sleep(ttl / 10)
                    await turn(c, sid, "again")
                await settle(application)
            assert not lookups(counter), counter.statements
            await asyncio.sleep(ttl * 1.2)  # not used for longer than its life: looked up again
            with counting(engine_of(application)) as counter:
                await turn(c, sid, "later")
            assert len(lookups(counter)) == 1, counter.statements


async def test_a_session_moved_to_another_agent_version_is_looked_up_again(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    # Another replica moves the session to another version of its agent (as the Responses
    # API does with a conversation): this replica's next turn still runs on the entry it
    # kept (read before the move, within its life); its admission sees the row changed, and
    # the turn after looks the session up afresh.
    await make_agent(client)
    sid = await make_session(client)
    await turn(client, sid, "one")
    changed = await client.put(
        "/v1/agents/helper", json={"spec": {"kind": "agent", "model": "echo"}}
    )
    assert changed.status_code == 200, changed.text
    version = changed.json()["version"]
    engine = engine_of(app)
    async with engine.begin() as conn:
        await conn.execute(
            sa.text("UPDATE sessions SET agent_version = :v WHERE id = :id"),
            {"v": version, "id": sid},
        )
    await turn(client, sid, "two")
    await settle(app)
    with counting(engine) as counter:
        data = await turn(client, sid, "three")
        await settle(app)
    assert len(lookups(counter)) == 1, counter.statements
    async with engine.connect() as conn:
        ran = await conn.scalar(
            sa.text("SELECT agent_version FROM runs WHERE id = :id"), {"id": data["run"]["id"]}
        )
    assert ran == version  # the turn after ran on the session's new version
