"""The run store: every statement of a session turn, behind one interface.

``RunStore`` is what the runtime calls to look a session up for a turn, admit a run (its
multitask rule and its Idempotency-Key included), mark a queued run started and read what its
turn needs, append and reserve its events, store its end (messages, status, usage, last
events, memory revision), drop what a paused run stored, and write a session's memory under
the session's busy rule. ``create_store`` (``app/runtime/store/__init__.py``) picks the one
implementation for the database once, at start-up:

- ``SqliteRunStore`` (``sqlite.py``): a turn's two writes (admission, end) as plain
  statements on the connection's ``sqlite3`` handle, on the loop's thread, one write
  transaction at a time (``WriteGate``); its lookup one SQLAlchemy query;
- ``PgRunStore`` (``postgres.py``): the turn's statements sent straight to asyncpg, admission
  as one server-side function (``agentstation_admit``), the end as one statement that also
  releases the session's run lock.

The operations both databases do alike with the same statements (a queued run's start, event
rows, memory writes) are implemented once, here. Each operation has exactly one implementation
per database. A turn's connection, run lock and run slot are its ``TurnLease``
(``locks.py``).
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections import OrderedDict
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.base import transient, utcnow
from app.db.models import Message, Run, RunEvent
from app.db.models import Session as SessionRow
from app.errors import Conflict, NotFound, ValidationFailed
from app.ops.budget import BudgetSpec
from app.runtime.budgets import BudgetFigures, read_figures
from app.runtime.events import gap_event
from app.runtime.store.locks import SessionLocks, TurnLease, lock_for_transaction
from app.runtime.store.reads import reading
from app.runtime.store.rows import bump_memory_rev, load_state
from app.runtime.store.writes import WriteGate
from app.schemas.agents import AgentSpec
from app.schemas.vocab import ACTIVE, BUSY, TERMINAL, WAITING, EventType, RunStatus

RUNS = cast(sa.Table, Run.__table__)  # Core statements: no ORM bookkeeping for rows nobody holds
EVENTS = cast(sa.Table, RunEvent.__table__)
Memory = dict[str, list[dict[str, Any]]]

# Agent versions never change once stored: their parsed specs are kept by (agent id, version).
_SPECS: OrderedDict[tuple[str, int], AgentSpec] = OrderedDict()
_SPECS_MAX = 1024


class SessionNotFound(NotFound):
    """404: the session of a turn does not exist (the chat endpoint then creates it)."""


def cached_spec(agent_id: str, version: int) -> AgentSpec | None:
    """The parsed spec of an agent version if this process parsed it already (``pinned``)."""
    return _SPECS.get((agent_id, version))


def pinned(agent_id: str, version: int, raw_spec: dict[str, Any] | None) -> AgentSpec:
    """The parsed spec of an agent version (parsed once per process)."""
    if raw_spec is None:
        raise NotFound(f"agent version {version} not found")
    key = (agent_id, version)
    spec = _SPECS.get(key)
    if spec is None:
        spec = _SPECS[key] = AgentSpec.model_validate(raw_spec)
        if len(_SPECS) > _SPECS_MAX:
            _SPECS.popitem(last=False)
    return spec


def session_copy(row: SessionRow) -> SessionRow:
    """A transient copy of a session row's columns (kept beyond its database session)."""
    return transient(
        SessionRow,
        pk=row.pk,
        tenant_id=row.tenant_id,
        id=row.id,
        agent_id=row.agent_id,
        agent_version=row.agent_version,
        metadata_=row.metadata_,
        created_at=row.created_at,
        updated_at=row.updated_at,
        memory_rev=row.memory_rev or 0,
    )


@dataclass
class Found:
    """A session looked up for a turn: its row, its agent's name and pinned spec, and the
    budget figures the turn starts with (the session's usage is read only when its agent has
    a token limit)."""

    session: SessionRow
    agent_name: str
    spec: AgentSpec
    tenant_limit: int | None
    tenant_used: int
    session_used: int = 0

    def figures(self, tenant_pending: int = 0) -> BudgetFigures:
        """``tenant_pending``: tokens this replica counted for the tenant and has not written."""
        budget = self.spec.budget
        limit = budget.max_total_tokens if budget is not None else None
        used = self.tenant_used + (tenant_pending if self.tenant_limit is not None else 0)
        return BudgetFigures(limit, self.session_used, self.tenant_limit, used)


@dataclass
class NewSession:
    """A session to create (``RunStore.create_session``)."""

    pk: str
    tenant_id: str
    id: str
    agent: str  # the agent's name
    metadata: dict[str, Any]
    at: datetime
    # Its first memory, inserted with it (a conversation's first items): message rows
    # ``{"key", "index", "data"}``; with any, the session starts at memory revision 1.
    memory: Sequence[dict[str, Any]] = ()

    def unknown_agent(self) -> ValidationFailed:
        return ValidationFailed(
            f"agent {self.agent!r} not found", param="agent", code="unknown_agent"
        )

    def exists(self) -> Conflict:
        return Conflict(f"session {self.id!r} already exists", param="id", code="session_exists")


def agent_spec_of(agent_id: str, version: int, raw_spec: str | dict[str, Any] | None) -> AgentSpec:
    """``pinned``, the raw spec given as JSON text (parsed only when not cached)."""
    spec = cached_spec(agent_id, version)
    if spec is not None:
        return spec
    parsed = json.loads(raw_spec) if isinstance(raw_spec, str) else raw_spec
    return pinned(agent_id, version, parsed)


@dataclass
class Admitted:
    """What admission decided for a new run."""

    run: Run  # the new run (kept in memory as its state), or the run of a known key
    created: bool  # False: the Idempotency-Key named an earlier run (``run`` is that one)
    rev: int | None  # the memory revision read at admission; None: read it when the run starts
    active: list[str]  # the session's queued, running and waiting runs before it, oldest first
    # The session still names the run's agent (by name) and version, as read by the admission
    # (PostgreSQL, migration 0013); None: not known.
    current: bool | None = None


@dataclass
class Started:
    """What a queued (or unread) run reads when it starts."""

    rev: int
    figures: BudgetFigures
    memory: Memory | None  # None: not read (the caller's cache holds revision ``rev``)


@dataclass
class RunEnd:
    """A run's end, as the store writes it in one transaction."""

    run: Run  # its final columns set (status, stop_reason, output, error, tokens, pending)
    rows: list[dict[str, Any]]  # new message rows (``rows.new_rows``)
    rewrite: list[str]  # memory keys whose history shrank: their rows are replaced
    events: list[dict[str, Any]]  # unsaved events and the terminal one: seq, type, data
    charge: int  # tokens to add to the tenant's counter now (0: counted elsewhere)
    at: datetime
    seq_reserved: int | None = None  # a waiting run: the last event id it may have sent


class RunStore(ABC):
    """A session turn's statements (see the module's docstring)."""

    def __init__(self, engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession]):
        self.engine = engine
        self.sessionmaker = sessionmaker
        self.locks = SessionLocks(engine)
        self.writes = WriteGate(engine)  # SQLite: one write transaction at a time

    @property
    def replicas(self) -> bool:
        """Whether other processes may run this database's runs (``SessionLocks.replicas``):
        cancels are then published to them, and runs of dead ones taken over."""
        return self.locks.replicas

    def lease(self) -> TurnLease:
        """A new turn's lease (empty until its lookup or admission uses it)."""
        return TurnLease(self.locks)

    @abstractmethod
    async def lookup(self, lease: TurnLease, tenant_id: str, session_id: str) -> Found:
        """The session for a turn (404 ``SessionNotFound``)."""

    @abstractmethod
    async def admit(self, lease: TurnLease, run: Run, strategy: str) -> Admitted:
        """Insert ``run`` (status ``running`` or ``queued`` as decided here) unless the session
        is busy under ``strategy`` (409 ``SessionBusy``) or gone (404); a known
        ``run.idempotency_key`` answers its earlier run instead. On PostgreSQL a run admitted
        ``running`` holds the session's run lock on ``lease``'s connection."""

    @abstractmethod
    async def create_session(self, new: NewSession) -> tuple[str, int, AgentSpec]:
        """Insert a session of the tenant's agent ``new.agent`` at its current version, in one
        statement that also reads the agent (so the version is the one current at the insert)
        and inserts ``new.memory`` (all or nothing); its (agent id, version, parsed spec).
        422 ``unknown_agent``, 409 ``session_exists``."""

    @abstractmethod
    async def store_end(self, lease: TurnLease | None, end: RunEnd) -> None:
        """Write a run's end in one transaction; on PostgreSQL on ``lease``'s connection when
        it holds the run lock, which that transaction's commit releases."""

    async def start(
        self,
        run: Run,
        spec_budget: BudgetSpec | None,
        wants_memory: Any,
    ) -> Started:
        """A run that waited for its session (stored ``queued``, or admitted without reading
        the revision): mark it running (when queued) and read the memory revision, the budget
        figures and, when ``wants_memory(rev)``, the memory, in one transaction."""
        queued = run.status == RunStatus.QUEUED
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            started = utcnow()
            if queued:
                await db.execute(
                    sa.update(RUNS)
                    .where(RUNS.c.id == run.id)
                    .values(status=RunStatus.RUNNING, started_at=started)
                )
            rev = int(
                await db.scalar(
                    sa.select(SessionRow.memory_rev).where(SessionRow.pk == run.session_pk)
                )
                or 0
            )
            figures = await read_figures(db, run.tenant_id, run.session_pk, spec_budget)
            memory = await load_state(db, run.session_pk) if wants_memory(rev) else None
        if queued:
            run.status, run.started_at = RunStatus.RUNNING, started
        return Started(rev, figures, memory)

    async def read(
        self, run: Run, spec_budget: BudgetSpec | None, memory: bool, figures: bool
    ) -> tuple[Memory | None, BudgetFigures | None]:
        """The session's memory and/or budget figures (no transaction)."""
        async with reading(self.engine, self.sessionmaker) as db:
            stored = await load_state(db, run.session_pk) if memory else None
            read = (
                await read_figures(db, run.tenant_id, run.session_pk, spec_budget)
                if figures
                else None
            )
        return stored, read

    async def load_memory(self, session_pk: str) -> Memory:
        """The session's stored memory (state_dict entries per key, oldest first)."""
        async with reading(self.engine, self.sessionmaker) as db:
            return await load_state(db, session_pk)

    async def claim_waiting(
        self, run_id: str, values: dict[str, Any] | None = None
    ) -> tuple[Run, list[tuple[int, str, dict[str, Any]]]] | str:
        """A run waiting for approval claimed to go on (``requires_action`` → ``queued``, by
        one conditional UPDATE: of two claims exactly one wins), with ``values`` (more
        columns to set); the run as it is now and its stored events (seq, type, data). When it
        does not wait: its status (``"None"`` for an unknown run)."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            done = await db.execute(
                sa.update(RUNS)
                .where(RUNS.c.id == run_id, RUNS.c.status == RunStatus.REQUIRES_ACTION)
                .values(status=RunStatus.QUEUED, pending=None, stop_reason=None, **(values or {}))
            )
            if not getattr(done, "rowcount", 0):
                return str(await db.scalar(sa.select(RUNS.c.status).where(RUNS.c.id == run_id)))
            row = (await db.execute(sa.select(RUNS).where(RUNS.c.id == run_id))).mappings().one()
            events = (
                await db.execute(
                    sa.select(EVENTS.c.seq, EVENTS.c.type, EVENTS.c.data)
                    .where(EVENTS.c.run_id == run_id)
                    .order_by(EVENTS.c.seq)
                )
            ).all()
        return transient(Run, **dict(row)), [(seq, type_, data) for seq, type_, data in events]

    async def run_status(self, run_id: str) -> str | None:
        """A run's stored status (None: no such run)."""
        async with self.sessionmaker() as db:
            return await db.scalar(sa.select(RUNS.c.status).where(RUNS.c.id == run_id))

    async def events_after(
        self, run_id: str, after: int
    ) -> tuple[tuple[str, str] | None, list[tuple[int, str, dict[str, Any]]]]:
        """A run's (status, session pk) (None: no such run) and its stored events after
        ``after`` (seq, type, data). The status is read first: a final status commits with
        the final events, so once it is read final the events read next include them."""
        async with self.sessionmaker() as db:
            found = (
                await db.execute(
                    sa.select(RUNS.c.status, RUNS.c.session_pk).where(RUNS.c.id == run_id)
                )
            ).first()
            rows = (
                await db.execute(
                    sa.select(EVENTS.c.seq, EVENTS.c.type, EVENTS.c.data)
                    .where(EVENTS.c.run_id == run_id, EVENTS.c.seq > after)
                    .order_by(EVENTS.c.seq)
                )
            ).all()
        status = (found[0], found[1]) if found is not None else None
        return status, [(seq, type_, data) for seq, type_, data in rows]

    async def run_ids(self, *statuses: str, session_pk: str | None = None) -> list[str]:
        """Ids of the runs with one of ``statuses`` (of one session), oldest first."""
        query = sa.select(RUNS.c.id).where(RUNS.c.status.in_(statuses))
        if session_pk is not None:
            query = query.where(RUNS.c.session_pk == session_pk)
        async with self.sessionmaker() as db:
            return list(await db.scalars(query.order_by(RUNS.c.created_at)))

    async def active_runs(self) -> list[tuple[str, str]]:
        """(id, session pk) of every queued or running run (recovery at start-up)."""
        async with self.sessionmaker() as db:
            rows = await db.execute(
                sa.select(RUNS.c.id, RUNS.c.session_pk).where(RUNS.c.status.in_(ACTIVE))
            )
            return [(run_id, pk) for run_id, pk in rows]

    async def waiting_runs(self) -> list[tuple[str, str, dict[str, Any] | None]]:
        """(id, tenant, pending) of every run waiting for approval (deadline checks)."""
        async with self.sessionmaker() as db:
            rows = await db.execute(
                sa.select(RUNS.c.id, RUNS.c.tenant_id, RUNS.c.pending).where(
                    RUNS.c.status == RunStatus.REQUIRES_ACTION
                )
            )
            return [(run_id, tenant, pending) for run_id, tenant, pending in rows]

    async def close_run(
        self,
        run_id: str,
        status_of: Callable[[str], RunStatus],
        mode: str,
        public: Callable[[Run], dict[str, Any]],
        waiting_only: bool = False,
    ) -> bool:
        """End an active run nobody runs (``Orphans.close``): status ``status_of(mode)``, stop
        reason ``mode``, the memory it stored while waiting dropped, then a ``run.gap`` (ids
        its owner may have sent unstored) and ``run.cancelled``; True if it did. ``waiting_only``:
        only a run still waiting for approval."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            # Locked: a live owner cannot raise its reservation meanwhile (it requires the run
            # active, and waits for this row, so sees it closed).
            run = await db.get(Run, run_id, with_for_update=True)
            if run is None or run.status in TERMINAL:
                return False
            if waiting_only and run.status not in WAITING:
                return False
            # Messages of a run not yet ended exist only if it waited for a person (stored at
            # the pause): the session's memory goes back to before the run (a tool-call reply
            # must not stay without its result).
            dropped = await db.execute(sa.delete(Message).where(Message.run_id == run_id))
            if getattr(dropped, "rowcount", 0):
                await bump_memory_rev(db, run.session_pk)
            run.pending = None
            run.status = status_of(mode)
            run.stop_reason, run.finished_at = mode, utcnow()
            last = sa.select(sa.func.max(EVENTS.c.seq)).where(EVENTS.c.run_id == run_id)
            stored = await db.scalar(last) or 0
            seq = max(stored, run.seq_reserved)
            gap = gap_event(stored, run.seq_reserved, mode)
            events = [gap] if gap is not None else []
            events.append((EventType.RUN_CANCELLED, {"run": public(run)}))
            for offset, (type_, data) in enumerate(events, 1):
                db.add(RunEvent(run_id=run_id, seq=seq + offset, type=type_, data=data))
            run.seq_reserved = seq + len(events)
        return True

    async def append_events(self, rows: list[dict[str, Any]]) -> None:
        """Store event rows (run_id, seq, type, data, created_at; ``raw``, ``data`` already
        encoded, when a store can use it) in one transaction."""
        values = [{k: v for k, v in row.items() if k != "raw"} for row in rows]
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            await db.execute(sa.insert(EVENTS), values)

    async def reserve_ids(self, run_id: str, target: int) -> bool:
        """Raise the run's ``seq_reserved`` to ``target`` while it is active; False when the
        run is no longer active (its bound stays)."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            done = await db.execute(
                sa.update(RUNS)
                .where(
                    RUNS.c.id == run_id,
                    RUNS.c.seq_reserved < target,
                    RUNS.c.status.in_(ACTIVE),
                )
                .values(seq_reserved=target)
            )
        return bool(getattr(done, "rowcount", 0))

    async def drop_paused(self, run_id: str, session_pk: str) -> None:
        """Delete the messages a run stored when it paused (its memory goes back to before)."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            dropped = await db.execute(sa.delete(Message).where(Message.run_id == run_id))
            if getattr(dropped, "rowcount", 0):
                await bump_memory_rev(db, session_pk)

    @asynccontextmanager
    async def idle_session(self, session_pk: str) -> AsyncIterator[AsyncSession | None]:
        """A write transaction under the session's admission lock (across replicas on
        PostgreSQL) if no run of the session is queued, running or waiting (None: busy)."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            await lock_for_transaction(db, session_pk)
            busy = await db.scalar(
                sa.select(Run.id).where(Run.session_pk == session_pk, Run.status.in_(BUSY)).limit(1)
            )
            yield db if busy is None else None
