"""Admission of a session's runs and its multitask strategies (reject, enqueue, interrupt,
rollback), with idempotency: SQLite (and PostgreSQL with an ``Idempotency-Key``) through the
ORM, PostgreSQL otherwise in one round trip (``agentstation_admit``, migration 0004)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from app.db import raw
from app.db.base import new_id, transient, utcnow
from app.db.models import SEQ_BLOCK, Run
from app.db.models import Session as SessionRow
from app.errors import NotFound, SessionBusy
from app.runtime import pgturn
from app.runtime.budgets import BudgetFigures
from app.runtime.jobs import input_message
from app.runtime.locks import RunHold, SessionLocks, advisory_key, lock_for_transaction
from app.runtime.messages import dump_message
from app.runtime.orphans import Orphans
from app.runtime.public import columns
from app.runtime.writes import WriteGate
from app.schemas.agents import AgentSpec
from app.schemas.vocab import BUSY, WAITING, RunStatus

RUNS = cast(sa.Table, Run.__table__)


@dataclass
class Submission:
    """A new message for a session."""

    tenant_id: str
    session: SessionRow
    agent_name: str
    spec: AgentSpec
    message: Any
    strategy: str = "reject"
    gen_params: dict[str, Any] | None = None
    options: dict[str, Any] | None = None
    idempotency_key: str | None = None
    budget: BudgetFigures | None = None  # read with the session (None: read when the run starts)
    # Counts the tokens of a tenant without a budget later, batched (the tenant's counter then
    # lags a little); None: every run's tokens are charged in its final transaction.
    charge_later: Callable[[str, int], Awaitable[None]] | None = None
    # PostgreSQL: the pooled connection the session was looked up on; ``submit`` admits the
    # run on it and owns it from then on.
    conn: AsyncConnection | None = None


# Starts an admitted run's job: (submission, run, memory revision read at admission or None,
# the run lock taken at admission or None, inline).
Starter = Callable[[Submission, Run, int | None, RunHold | None, bool], None]


class Admissions:
    """Decides whether a session takes a new run now, later (queued) or not (409), and starts
    it with ``start``; earlier runs an ``interrupt``/``rollback`` replaces go with ``cancel``."""

    def __init__(
        self,
        engine: AsyncEngine,
        sessionmaker: async_sessionmaker[AsyncSession],
        locks: SessionLocks,
        writes: WriteGate,
        orphans: Orphans,
        cancel: Callable[[str, str], Awaitable[None]],
        start: Starter,
    ) -> None:
        self.engine = engine
        self.sessionmaker = sessionmaker
        self.locks = locks
        self.writes = writes
        self.orphans = orphans
        self.cancel = cancel
        self.start = start

    async def submit(self, sub: Submission, inline: bool = False) -> tuple[Run, bool]:
        """Create (or, with a known Idempotency-Key, find) the run; returns (run, created)."""
        try:
            return await self._submit(sub, inline)
        except SessionBusy:
            # Busy with a run whose replica died? Close it (as recovery would) and try again.
            if not await self.orphans.reap_session(sub.session.pk):
                raise
        return await self._submit(sub, inline)

    async def _submit(self, sub: Submission, inline: bool) -> tuple[Run, bool]:
        if self.locks.postgres and not sub.idempotency_key:
            return await self._submit_pg(sub, inline), True
        if sub.conn is not None:
            conn, sub.conn = sub.conn, None
            await conn.close()
        session_pk = sub.session.pk
        to_cancel: list[str] = []
        async with self.locks.admission(session_pk):
            try:
                async with self.writes.hold(), self.sessionmaker() as db, db.begin():
                    await lock_for_transaction(db, session_pk)
                    if sub.idempotency_key and (found := await self._by_key(db, sub)) is not None:
                        return found, False
                    # The session's memory revision and its active runs, in one query.
                    rows = (
                        await db.execute(
                            sa.select(SessionRow.memory_rev, Run.id, Run.status)
                            .select_from(SessionRow)
                            .outerjoin(
                                Run, (Run.session_pk == SessionRow.pk) & Run.status.in_(BUSY)
                            )
                            .where(SessionRow.pk == session_pk)
                            .order_by(Run.created_at)
                        )
                    ).all()
                    rev = rows[0][0] if rows else None
                    active = [run_id for _, run_id, _ in rows if run_id is not None]
                    waiting = any(status in WAITING for _, _, status in rows)
                    # A run waiting for a person is never queued behind (enqueue refuses).
                    if active and (
                        sub.strategy == "reject" or (waiting and sub.strategy == "enqueue")
                    ):
                        raise SessionBusy(sub.session.id)
                    if sub.strategy in ("interrupt", "rollback"):
                        to_cancel = active
                    # An idle session's run is ``running`` from the start (no second write);
                    # behind another run it is ``queued`` until that one ends. On PostgreSQL
                    # it is ``queued`` until it holds the session's run lock: a ``running``
                    # run always holds it, so a free lock means its replica died (reap).
                    run = new_run(sub, running=not active and not self.locks.postgres)
                    # A Core insert: the Run object stays in memory as the run's state.
                    await db.execute(sa.insert(RUNS).values(columns(run)))
            except IntegrityError:  # a concurrent retry with the same Idempotency-Key won
                async with self.sessionmaker() as db:
                    found = await self._by_key(db, sub)
                if found is None:
                    raise
                return found, False
            mode = "interrupt" if sub.strategy == "interrupt" else "rollback"
            for run_id in to_cancel:
                await self.cancel(run_id, mode)
            self.start(sub, run, None if run.status == RunStatus.QUEUED else rev, None, inline)
        return run, True

    async def _submit_pg(self, sub: Submission, inline: bool = False) -> Run:
        """PostgreSQL: admit the run in one round trip (``agentstation_admit``); an idle
        session's run keeps the admission's connection, which holds the session's run lock."""
        session_pk = sub.session.pk
        hold = RunHold(conn=sub.conn, key=advisory_key(session_pk))
        sub.conn = None
        try:
            async with self.locks.admission(session_pk):
                run = new_run(sub, running=True)
                # The run slot first: released with the connection unless admit locks.
                take = hold.slot = await self.locks.try_take_slot()
                if hold.conn is None:
                    hold.conn = await self.engine.connect()
                hold.pg = await raw.driver(hold.conn)
                hold.locked = None  # unknown until admit returns
                got = await pgturn.admit(
                    hold.pg,
                    run,
                    sub.strategy == "reject",
                    take,
                    advisory_key("admit:" + session_pk),
                    hold.key,
                    wait_busy=sub.strategy == "enqueue",
                )
                hold.locked = got is not None and got.status == RunStatus.RUNNING
                if not hold.locked:
                    await self.locks.release(hold)  # back to the pool
                if got is None:
                    raise NotFound(f"session {sub.session.id!r} not found", param="id")
                if got.status is None:
                    raise SessionBusy(sub.session.id)
                if not hold.locked:
                    run.status, run.started_at = RunStatus.QUEUED, None
                if sub.strategy in ("interrupt", "rollback"):
                    mode = "interrupt" if sub.strategy == "interrupt" else "rollback"
                    for run_id in got.active:
                        await self.cancel(run_id, mode)
                if hold.locked:
                    self.start(sub, run, got.rev, hold, inline)
                else:
                    self.start(sub, run, None, None, inline)  # reads the revision at start
        except BaseException:
            await self.locks.release(hold)  # before the job owns it (else a no-op)
            raise
        return run

    @asynccontextmanager
    async def writing_memory(self, session_pk: str, session_id: str) -> AsyncIterator[AsyncSession]:
        """A transaction that may replace the session's memory (PUT, reset), admitted like a
        run: under the session's admission lock (on PostgreSQL across replicas), and refused
        with 409 ``session_busy`` while a run of the session is queued, running or waiting for
        approval, so a turn never loads, or appends to, a memory replaced under it."""
        for attempt in (1, 2):
            async with self.locks.admission(session_pk):
                async with self.writes.hold(), self.sessionmaker() as db, db.begin():
                    await lock_for_transaction(db, session_pk)
                    busy = await db.scalar(
                        sa.select(Run.id)
                        .where(Run.session_pk == session_pk, Run.status.in_(BUSY))
                        .limit(1)
                    )
                    if busy is None:
                        yield db
                        return
            # Busy with a run whose replica died? Close it (as recovery would), then retry.
            if attempt == 2 or not await self.orphans.reap_session(session_pk):
                raise SessionBusy(session_id)

    async def _by_key(self, db: AsyncSession, sub: Submission) -> Run | None:
        found: Run | None = await db.scalar(
            sa.select(Run).where(
                Run.tenant_id == sub.tenant_id, Run.idempotency_key == sub.idempotency_key
            )
        )
        return found


def new_run(sub: Submission, running: bool) -> Run:
    """The transient Run of a submission (``running``: it holds the session from the start)."""
    # Parsed once: the job reads it back (input_message returns a message as it is).
    sub.message = message = input_message(sub.message)
    now = utcnow()
    return transient(
        Run,
        id=new_id("run"),
        tenant_id=sub.tenant_id,
        session_pk=sub.session.pk,
        session_id=sub.session.id,
        agent=sub.agent_name,
        agent_version=sub.session.agent_version,
        status=RunStatus.RUNNING if running else RunStatus.QUEUED,
        stop_reason=None,
        input=dump_message(message),
        output=None,
        error=None,
        options=sub.options or {},
        prompt_tokens=0,
        completion_tokens=0,
        idempotency_key=sub.idempotency_key,
        created_at=now,
        started_at=now if running else None,
        finished_at=None,
        seq_reserved=SEQ_BLOCK,
        pending=None,  # PostgreSQL's admission leaves it to the column default
    )
