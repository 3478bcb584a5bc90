"""The run store on SQLite: a turn's writes as plain statements on the connection's ``sqlite3``
handle, one write transaction at a time (``WriteGate``).

A turn's two write transactions (its admission, its end) skip SQLAlchemy per statement: they
run on the pooled connection's ``sqlite3.Connection`` (the statements already run on the
loop's thread, app/db/sqlite_inline.py), with values stored as SQLAlchemy stores them (JSON
text, UTC datetimes as ``YYYY-MM-DD HH:MM:SS.ffffff``), so every ORM read sees the same rows.
Through SQLAlchemy Core a turn's admission took ~1.1 ms and its end ~1.0 ms of the event
loop; plain statements take a fraction of that (bench/README.md). Statements are reported to
``app.db.raw.listeners`` (tests count them). Admission is a Python transaction here
(PostgreSQL's is a server-side function): the session's memory revision and busy runs in one
query, the multitask rule, the insert. A SQLite database is one process's: the session is
held by ``SessionLocks``' in-process lock, no run lock.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any, TypeVar

from app.db import raw
from app.db.base import transient
from app.db.models import Run
from app.db.models import Session as SessionRow
from app.errors import NotFound, SessionBusy
from app.runtime.public import columns
from app.runtime.store.base import (
    Admitted,
    Found,
    NewSession,
    RunEnd,
    RunStore,
    SessionNotFound,
    agent_spec_of,
    cached_spec,
    pinned,
)
from app.runtime.store.locks import TurnLease
from app.runtime.store.reads import reading
from app.schemas.agents import AgentSpec
from app.schemas.vocab import BUSY, WAITING, MultitaskStrategy, RunStatus

T = TypeVar("T")
_BUSY = ", ".join(f"'{status.value}'" for status in BUSY)
# Also whether the session still names the run's agent (by name) and version (``current``).
ACTIVE_RUNS = f"""\
SELECT s.memory_rev, r.id, r.status, s.agent_version = ? AND EXISTS(
    SELECT 1 FROM agents a WHERE a.id = s.agent_id AND a.name = ?) FROM sessions s
LEFT JOIN runs r ON r.session_pk = s.pk AND r.status IN ({_BUSY})
WHERE s.pk = ? ORDER BY r.created_at"""
BY_KEY = "SELECT id FROM runs WHERE tenant_id = ? AND idempotency_key = ?"
RUN_COLUMNS = [column.name for column in Run.__table__.columns]
INSERT_RUN = (
    f"INSERT INTO runs ({', '.join(RUN_COLUMNS)}) VALUES ({', '.join('?' * len(RUN_COLUMNS))})"
)
INSERT_MESSAGES = (
    'INSERT INTO messages (session_pk, "key", "index", data, run_id, created_at) '
    "VALUES (?, ?, ?, ?, ?, ?)"
)
BUMP = "UPDATE sessions SET memory_rev = memory_rev + 1 WHERE pk = ?"
END_RUN = (
    "UPDATE runs SET status = ?, stop_reason = ?, output = ?, error = ?, prompt_tokens = ?, "
    "completion_tokens = ?, finished_at = ?, pending = ?, "
    "seq_reserved = coalesce(?, seq_reserved) WHERE id = ?"
)
LOOKUP = """\
SELECT s.pk, s.tenant_id, s.id, s.agent_id, s.agent_version, s.metadata, s.created_at,
    s.updated_at, s.memory_rev, a.name, v.spec, t.token_budget, t.tokens_used
FROM sessions s
JOIN agents a ON a.id = s.agent_id
LEFT JOIN agent_versions v ON v.agent_id = s.agent_id AND v.version = s.agent_version
LEFT JOIN tenants t ON t.id = s.tenant_id
WHERE s.tenant_id = ? AND s.id = ?"""
SESSION_TOKENS = (
    "SELECT coalesce(sum(prompt_tokens + completion_tokens), 0) FROM runs WHERE session_pk = ?"
)
AGENT = "SELECT id, version, spec FROM agents WHERE tenant_id = ? AND name = ?"
CREATE_SESSION = (
    "INSERT INTO sessions (pk, tenant_id, id, agent_id, agent_version, metadata, created_at, "
    "updated_at, memory_rev) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
CHARGE = "UPDATE tenants SET tokens_used = tokens_used + ? WHERE id = ?"
INSERT_EVENTS = (
    "INSERT INTO run_events (run_id, seq, type, data, created_at) VALUES (?, ?, ?, ?, ?)"
)


def stored(value: Any) -> Any:
    """A value as SQLAlchemy stores it in SQLite (JSON text, naive UTC datetime text)."""
    if isinstance(value, datetime):
        if value.tzinfo is not None:
            value = value.astimezone(UTC)
        return value.strftime("%Y-%m-%d %H:%M:%S.%f")
    if isinstance(value, dict | list):
        return json.dumps(value)
    return value


_AS_IS = frozenset({str, int, float, bool, type(None)})  # exact types ``stored`` keeps


def _stored_row(values: dict[str, Any], names: list[str]) -> list[Any]:
    """``stored`` of each of ``values``' ``names`` (a run's row: most of its ~20 columns are
    kept as they are, without the call)."""
    return [
        value if type(value) in _AS_IS else stored(value)
        for value in map(values.__getitem__, names)
    ]


def _utc(value: Any) -> datetime | None:
    """A datetime as SQLAlchemy stored it (naive UTC text), timezone-aware (``UTCDateTime``)."""
    if value is None:
        return None
    parsed = value if isinstance(value, datetime) else datetime.fromisoformat(value)
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=UTC)


def _event_json(event: dict[str, Any]) -> str | None:
    raw = event.get("raw")  # already encoded for its SSE frame (``Event.encoded``)
    return raw.decode() if raw is not None else _json(event["data"])


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


class _Tx:
    """Statements of one write transaction on a ``sqlite3`` connection (reported to listeners)."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def execute(self, sql: str, args: Sequence[Any] = ()) -> sqlite3.Cursor:
        if raw.listeners:
            raw.report(sql)
        return self.conn.execute(sql, args)

    def executemany(self, sql: str, rows: list[Sequence[Any]]) -> None:
        if raw.listeners:
            raw.report(sql)
        self.conn.executemany(sql, rows)


def _transaction(handle: sqlite3.Connection, fn: Callable[[_Tx], T]) -> T:
    """``fn`` in one write transaction on ``handle``: committed, or rolled back if it raises."""
    if raw.listeners:
        raw.report("BEGIN IMMEDIATE")  # a transaction (tests count them)
    handle.execute("BEGIN IMMEDIATE")
    try:
        result = fn(_Tx(handle))
    except BaseException:
        handle.rollback()
        raise
    handle.commit()
    return result


class SqliteRunStore(RunStore):
    """``RunStore`` on SQLite."""

    async def _write(self, fn: Callable[[_Tx], T]) -> T:
        """``fn`` in one write transaction, its statements sent to ``sqlite3`` directly; rolled
        back if ``fn`` raises."""
        async with self.writes.hold():
            return await raw.on_sqlite(self.engine, _transaction, fn)

    async def lookup(self, lease: TurnLease, tenant_id: str, session_id: str) -> Found:
        # A plain read on the connection's sqlite3 handle (no transaction, no write gate):
        # through the ORM a lookup took ~1 ms of the loop, a few percent of every turn's CPU
        # as sessions' cached entries expire (``services/turns.py: _look_up``).
        def read(handle: sqlite3.Connection) -> tuple[Any, AgentSpec, int]:
            tx = _Tx(handle)
            found = tx.execute(LOOKUP, (tenant_id, session_id)).fetchone()
            if found is None:
                raise SessionNotFound(f"session {session_id!r} not found", param="id")
            agent_id, version, raw_spec = found[3], found[4], found[10]
            spec = cached_spec(agent_id, version) or pinned(
                agent_id, version, None if raw_spec is None else json.loads(raw_spec)
            )
            session_used = 0
            if spec.budget is not None and spec.budget.max_total_tokens is not None:
                session_used = int(tx.execute(SESSION_TOKENS, (found[0],)).fetchone()[0])
            return found, spec, session_used

        found, spec, session_used = await raw.on_sqlite(self.engine, read)
        (pk, tenant, sid, agent_id, version, metadata, created, updated, rev) = found[:9]
        name, _, budget, used = found[9:]
        row = transient(
            SessionRow,
            pk=pk,
            tenant_id=tenant,
            id=sid,
            agent_id=agent_id,
            agent_version=version,
            metadata_=None if metadata is None else json.loads(metadata),
            created_at=_utc(created),
            updated_at=_utc(updated),
            memory_rev=rev or 0,
        )
        return Found(row, name, spec, budget, int(used or 0), session_used)

    async def create_session(self, new: NewSession) -> tuple[str, int, AgentSpec]:
        at = stored(new.at)

        def create(tx: _Tx) -> Any:
            agent = tx.execute(AGENT, (new.tenant_id, new.agent)).fetchone()
            if agent is None:
                raise new.unknown_agent()
            row = (new.pk, new.tenant_id, new.id, agent[0], agent[1], json.dumps(new.metadata))
            try:
                tx.execute(CREATE_SESSION, (*row, at, at, 1 if new.memory else 0))
            except sqlite3.IntegrityError:
                raise new.exists() from None
            if new.memory:  # its first memory, in the same transaction
                tx.executemany(
                    INSERT_MESSAGES,
                    [
                        (new.pk, m["key"], m["index"], _json(m["data"]), None, at)
                        for m in new.memory
                    ],
                )
            return agent

        agent = await self._write(create)
        return agent[0], agent[1], agent_spec_of(agent[0], agent[1], agent[2])

    async def admit(self, lease: TurnLease, run: Run, strategy: str) -> Admitted:
        key = run.idempotency_key

        def insert(tx: _Tx) -> tuple[str | None, int, list[str], bool]:
            if key and (hit := tx.execute(BY_KEY, (run.tenant_id, key)).fetchone()):
                return hit[0], 0, [], False
            rows = tx.execute(
                ACTIVE_RUNS, (run.agent_version, run.agent, run.session_pk)
            ).fetchall()
            if not rows:
                raise NotFound(f"session {run.session_id!r} not found", param="id")
            active = [row[1] for row in rows if row[1] is not None]
            waiting = any(row[2] in WAITING for row in rows)
            # A run waiting for a person is never queued behind (enqueue refuses).
            if active and (
                strategy == MultitaskStrategy.REJECT
                or (waiting and strategy == MultitaskStrategy.ENQUEUE)
            ):
                raise SessionBusy(run.session_id)
            # An idle session's run is ``running`` from the start (no second write); behind
            # another run it is ``queued`` until that one ends.
            if active:
                run.status, run.started_at = RunStatus.QUEUED, None
            values = columns(run)
            tx.execute(INSERT_RUN, _stored_row(values, RUN_COLUMNS))
            return None, int(rows[0][0]), active, bool(rows[0][3])

        def by_key(tx: _Tx) -> Any:
            return tx.execute(BY_KEY, (run.tenant_id, key)).fetchone()

        try:
            earlier, rev, active, current = await self._write(insert)
        except sqlite3.IntegrityError:  # a concurrent retry with the same Idempotency-Key won
            if not key:
                raise
            hit = await self._write(by_key)
            if hit is None:
                raise
            earlier = hit[0]
        if earlier is not None:
            async with reading(self.engine, self.sessionmaker) as db:
                found = await db.get(Run, earlier)
            assert found is not None
            return Admitted(found, False, None, [])
        return Admitted(run, True, None if active else rev, active, current)

    async def append_events(self, rows: list[dict[str, Any]]) -> None:
        # A live run's events mid-run (``RunChannel.save``), their JSON the SSE frames' own
        # (``raw``): through the ORM each save cost a session, a compiled insert and every
        # event's ``data`` encoded again.
        values: list[Sequence[Any]] = [
            (r["run_id"], r["seq"], r["type"], _event_json(r), stored(r["created_at"]))
            for r in rows
        ]
        await self._write(lambda tx: tx.executemany(INSERT_EVENTS, values))

    async def store_end(self, lease: TurnLease | None, end: RunEnd) -> None:
        run = end.run
        at = stored(end.at)

        def end_run(tx: _Tx) -> None:
            if end.rewrite:
                marks = ", ".join("?" * len(end.rewrite))
                tx.execute(
                    f'DELETE FROM messages WHERE session_pk = ? AND "key" IN ({marks})',
                    (run.session_pk, *end.rewrite),
                )
            if end.rows:
                tx.executemany(
                    INSERT_MESSAGES,
                    [
                        (r["session_pk"], r["key"], r["index"], _json(r["data"]), r["run_id"], at)
                        for r in end.rows
                    ],
                )
            if end.rows or end.rewrite:
                tx.execute(BUMP, (run.session_pk,))
            tx.execute(
                END_RUN,
                (
                    run.status,
                    run.stop_reason,
                    _json(run.output),
                    _json(run.error),
                    run.prompt_tokens,
                    run.completion_tokens,
                    stored(run.finished_at),
                    _json(run.pending),
                    end.seq_reserved,
                    run.id,
                ),
            )
            if end.charge:
                tx.execute(CHARGE, (end.charge, run.tenant_id))
            tx.executemany(
                INSERT_EVENTS,
                [(run.id, e["seq"], e["type"], _event_json(e), at) for e in end.events],
            )

        await self._write(end_run)
