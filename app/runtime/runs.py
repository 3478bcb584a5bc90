"""RunManager: one task per run, independent of requests; strategies, cancel, event followers."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, async_sessionmaker

from app.db import raw
from app.db.base import new_id, transient, utcnow
from app.db.models import SEQ_BLOCK, Run, RunEvent
from app.db.models import Session as SessionRow
from app.errors import NotFound, SessionBusy
from app.runtime import pgturn
from app.runtime.approvals import Resumption, required_action
from app.runtime.budgets import BudgetFigures
from app.runtime.events import Event, RunChannel
from app.runtime.jobs import Job, execute, input_message
from app.runtime.locks import RunHold, SessionLocks, advisory_key, lock_for_transaction
from app.runtime.memory_cache import MemoryCache
from app.runtime.messages import dump_message
from app.runtime.notify import CancelBus
from app.runtime.orphans import Orphans
from app.runtime.registry import ServableAgent
from app.runtime.writes import WriteGate
from app.schemas.agents import AgentSpec
from app.schemas.vocab import BUSY, TERMINAL, WAITING, EventType, RunStatus, ends_stream

log = logging.getLogger(__name__)
RUNS = cast(sa.Table, Run.__table__)
KEEP_CHANNEL_S = 30.0  # finished runs are served from memory a little longer, then from the DB
FOLLOW_POLL_S = 0.2  # a run owned elsewhere is followed by reading its stored events this often
REAP_EVERY = 5  # polls between checks that its owner (another replica) is still alive


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


def run_public(run: Run) -> dict[str, Any]:
    """The API shape of a run (JSON-ready): ``RunPublic(...).model_dump(mode="json")``, built
    directly (the run's JSON columns already hold JSON-ready values; tests check both agree)."""
    prompt, completion = run.prompt_tokens, run.completion_tokens
    return {
        "id": run.id,
        "session_id": run.session_id,
        "agent": run.agent,
        "status": run.status,
        "stop_reason": run.stop_reason,
        "input": run.input,
        "output": run.output,
        "error": run.error,
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
        },
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
        "required_action": required_action(run.pending),
    }


def _iso(value: datetime | None) -> str | None:
    """A datetime as pydantic's JSON mode writes it (UTC as ``Z``)."""
    if value is None:
        return None
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _columns(run: Run) -> dict[str, Any]:
    return {column.key: getattr(run, column.key) for column in Run.__mapper__.column_attrs}


class RunManager:
    """Owns every run of this process."""

    def __init__(
        self,
        engine: AsyncEngine,
        sessionmaker: async_sessionmaker[AsyncSession],
        build_agent: Callable[[AgentSpec, str | None], ServableAgent],
        flush_s: float = 0.1,
        cancel_timeout_s: float = 1.0,
        store_s: float | None = None,
    ) -> None:
        self.engine = engine
        self.sessionmaker = sessionmaker
        self.build_agent = build_agent
        self.locks = SessionLocks(engine)
        self.flush_s = flush_s
        self.store_s = store_s  # mid-run event storage interval (None: every flush)
        self.cancel_timeout_s = cancel_timeout_s
        self.jobs: dict[str, Job] = {}
        self.channels: dict[str, RunChannel] = {}
        self._background: set[asyncio.Task[Any]] = set()
        self.bus = CancelBus(engine, self._remote_cancel)
        self.writes = WriteGate(engine)  # SQLite: one write transaction at a time
        self.memory = MemoryCache()  # sessions' loaded memories (checked against memory_rev)
        # Runs of dead processes: closed at start-up, or taken over by this live replica.
        self.orphans = Orphans(
            sessionmaker, self.writes, self.locks, lambda run_id: run_id in self.jobs, run_public
        )
        # Runs this process finished, served from memory for KEEP_CHANNEL_S (the POST's answer).
        self.finished: dict[str, Run] = {}
        self.finished_public: dict[str, dict[str, Any]] = {}  # their API shape (run_public)
        # Called with each run this process finished (ops: metrics and the "run finished" log).
        self.on_finished: Callable[[Run], None] | None = None
        # Runs waiting for a person (all replicas; counted by the approval timeout check) and,
        # for ops, each decision's wait in seconds and outcome ("resumed", "timeout_cancelled").
        self.waiting_count = 0
        self.on_approval: Callable[[float, str], None] | None = None

    public = staticmethod(run_public)

    def on_approval_decided(self, waited_s: float, outcome: str) -> None:
        """A waiting run was decided about (ops: the time-waited histogram)."""
        if self.on_approval is not None:
            self.on_approval(waited_s, outcome)

    async def submit(self, sub: Submission, inline: bool = False) -> tuple[Run, bool]:
        """Create (or, with a known Idempotency-Key, find) the run; returns (run, created).

        ``inline``: the run gets no task of its own; a created run must be run at once by the
        caller, with ``run_here`` (a request that waits for the run's end anyway)."""
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
                    run = self._new_run(sub, running=not active and not self.locks.postgres)
                    # A Core insert: the Run object stays in memory as the run's state.
                    await db.execute(sa.insert(RUNS).values(_columns(run)))
            except IntegrityError:  # a concurrent retry with the same Idempotency-Key won
                async with self.sessionmaker() as db:
                    found = await self._by_key(db, sub)
                if found is None:
                    raise
                return found, False
            mode = "interrupt" if sub.strategy == "interrupt" else "rollback"
            for run_id in to_cancel:
                await self.cancel(run_id, mode)
            self._start(sub, run, None if run.status == RunStatus.QUEUED else rev, inline=inline)
        return run, True

    async def _submit_pg(self, sub: Submission, inline: bool = False) -> Run:
        """PostgreSQL: admit the run in one round trip (``agentstation_admit``); an idle
        session's run keeps the admission's connection, which holds the session's run lock."""
        session_pk = sub.session.pk
        hold = RunHold(conn=sub.conn, key=advisory_key(session_pk))
        sub.conn = None
        try:
            async with self.locks.admission(session_pk):
                run = self._new_run(sub, running=True)
                take = self.locks.slot_free()
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
                if hold.locked:
                    await self.locks.take_slot()
                    hold.slot = True
                else:
                    run.status, run.started_at = RunStatus.QUEUED, None
                if sub.strategy in ("interrupt", "rollback"):
                    mode = "interrupt" if sub.strategy == "interrupt" else "rollback"
                    for run_id in got.active:
                        await self.cancel(run_id, mode)
                if hold.locked:
                    self._start(sub, run, got.rev, hold, inline)
                else:
                    self._start(sub, run, None, inline=inline)  # reads the revision at start
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

    def _new_run(self, sub: Submission, running: bool) -> Run:
        # Parsed once: ``_start`` reads it back (input_message returns a message as it is).
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

    def _start(
        self,
        sub: Submission,
        run: Run,
        rev: int | None,
        held: RunHold | None = None,
        inline: bool = False,
    ) -> None:
        """Start the run's task (``inline``: the caller runs it, see ``run_here``); ``rev`` is
        the memory revision read at admission (None when the run is queued: it reads it, and
        the budget, when it starts); ``held``: the session's run lock, taken at admission
        (PostgreSQL)."""
        channel = RunChannel(
            run.id, self.sessionmaker, self.flush_s, self.writes, SEQ_BLOCK, self.store_s
        )
        job = Job(
            run=run,
            run_id=run.id,
            tenant_id=sub.tenant_id,
            session_pk=sub.session.pk,
            session_id=sub.session.id,
            agent_name=sub.agent_name,
            spec=sub.spec,
            message=input_message(sub.message),
            gen_params=sub.gen_params or {},
            channel=channel,
            queued=run.status == RunStatus.QUEUED,
            rev=rev,
            budget=sub.budget if rev is not None else None,
            charge_later=sub.charge_later,
            held=held,
        )
        # run.created is the first event (seq 1) of every run.
        channel.seed(EventType.RUN_CREATED, {"run": run_public(run)})
        self._launch(job, inline, held)

    def _launch(self, job: Job, inline: bool, held: RunHold | None = None) -> None:
        """Register ``job`` and start its task (``inline``: the caller runs it)."""
        channel = job.channel
        self.jobs[job.run_id] = job
        self.channels[job.run_id] = channel
        channel.start()
        if inline:
            job.task = asyncio.current_task()
            job.inline = True
            return
        job.task = asyncio.create_task(execute(self, job), name=f"run-{job.run_id}")
        if held is not None:  # a task cancelled before its first step never ran execute()
            job.task.add_done_callback(lambda _task: self._release_unclaimed(job))

    async def run_here(self, run_id: str) -> None:
        """Run a job submitted with ``inline=True`` in the calling task, to its end: no task
        of its own and no wake-up of the waiting request. ``cancel`` cancels the calling task
        meanwhile, as it would the run's own task; that cancellation ends here."""
        job = self.jobs[run_id]
        task = asyncio.current_task()
        assert job.inline and job.task is task and task is not None
        try:
            await execute(self, job)
        except asyncio.CancelledError:
            if not job.cancel_sent:
                raise
        finally:
            if job.cancel_sent:  # ours: the caller goes on (and answers with the run's end)
                job.cancel_sent = False
                task.uncancel()

    def _release_unclaimed(self, job: Job) -> None:
        held, job.held = job.held, None
        if held is not None:
            task = asyncio.create_task(self.locks.release(held))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

    def forget(self, job: Job) -> None:
        """Called by a finished job: drop it now, its channel after a grace period (a run
        that waits for a person at once: followers then read the stored log, which goes on
        when the run resumes, perhaps on another replica)."""
        if self.jobs.get(job.run_id) is job:
            self.jobs.pop(job.run_id, None)
        if job.run.status in WAITING:
            if self.channels.get(job.run_id) is job.channel:
                self.channels.pop(job.run_id, None)
        loop = asyncio.get_running_loop()
        loop.call_later(KEEP_CHANNEL_S, self._drop_finished, job.run_id, job.channel)

    def _drop_finished(self, run_id: str, channel: RunChannel | None = None) -> None:
        if channel is not None and self.channels.get(run_id) not in (None, channel):
            return  # resumed since: its new channel and result stay
        self.channels.pop(run_id, None)
        self.finished.pop(run_id, None)
        self.finished_public.pop(run_id, None)

    def resume(
        self,
        run: Run,
        spec: AgentSpec,
        resumption: Resumption,
        events: list[Event],
        inline: bool = False,
    ) -> Job:
        """Start the job of a run claimed back from ``requires_action`` (now ``queued``):
        its events number on from ``events`` (the stored log)."""
        channel = RunChannel(
            run.id, self.sessionmaker, self.flush_s, self.writes, run.seq_reserved, self.store_s
        )
        channel.preload(events)
        self.finished.pop(run.id, None)
        self.finished_public.pop(run.id, None)
        job = Job(
            run=run,
            run_id=run.id,
            tenant_id=run.tenant_id,
            session_pk=run.session_pk,
            session_id=run.session_id,
            agent_name=run.agent,
            spec=spec,
            message=input_message(run.input),
            gen_params={},
            channel=channel,
            queued=True,
            resume=resumption,
        )
        self._launch(job, inline)
        return job

    def result(self, run_id: str) -> Run | None:
        """The final state of a run this process finished recently (None: read the database)."""
        return self.finished.get(run_id)

    def result_public(self, run_id: str) -> dict[str, Any] | None:
        """``run_public`` of ``result(run_id)``, as its terminal event carries it."""
        return self.finished_public.get(run_id)

    async def start(self) -> int:
        """Listen for cancels from other replicas; close runs left by dead processes."""
        await self.bus.start()
        return await self.orphans.recover()

    def _remote_cancel(self, run_id: str, mode: str) -> None:
        if run_id in self.jobs:
            self.cancel_soon(run_id, mode)

    async def cancel(self, run_id: str, mode: str = "cancelled") -> None:
        """Cancel a run (reaching the model call and the tool) and wait for it to stop."""
        job = self.jobs.get(run_id)
        if job is None and await self._waiting(run_id):
            # Nobody runs it: close it here (a concurrent resume claims it, or finds it closed).
            if await self.orphans.close(run_id, mode, waiting_only=True):
                return
            job = self.jobs.get(run_id)  # resumed meanwhile, here or elsewhere
        if job is None:
            if self.bus.enabled and await self._cancel_remote(run_id, mode):
                return
            await self.orphans.close(run_id, mode)
            return
        if job.task is None or job.finishing:
            await job.done.wait()
            return
        if job.cancel_mode is None:
            job.cancel_mode = mode
            job.cancel_sent = job.inline  # see run_here
            job.task.cancel()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(job.done.wait()), self.cancel_timeout_s * 5)

    async def _waiting(self, run_id: str) -> bool:
        async with self.sessionmaker() as db:
            status = await db.scalar(sa.select(Run.status).where(Run.id == run_id))
        return status in WAITING

    async def _cancel_remote(self, run_id: str, mode: str) -> bool:
        """Ask the replica that owns the run; True once the run has a final status."""
        await self.bus.publish(run_id, mode)
        for _ in range(int(self.cancel_timeout_s * 2 / 0.05) + 1):
            async with self.sessionmaker() as db:
                status = await db.scalar(sa.select(Run.status).where(Run.id == run_id))
            if status is None or status in TERMINAL:
                return True
            await asyncio.sleep(0.05)
        return False  # nobody owns it: the caller closes it as an orphan

    def cancel_soon(self, run_id: str, mode: str) -> None:
        """Cancel from a context that is itself being cancelled (a dropped stream)."""
        task = asyncio.create_task(self.cancel(run_id, mode))
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def wait(self, run_id: str) -> None:
        """Until the run has a final status."""
        job = self.jobs.get(run_id)
        if job is not None:
            await job.done.wait()
            return
        async for _ in self.follow(run_id, 0):
            pass

    async def follow(self, run_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Stored events after ``after``, then live ones, until the run ends."""
        channel = self.channels.get(run_id)
        if channel is not None:
            async for event in channel.follow(after):
                yield event
            return
        polls = 0
        while True:
            async with self.sessionmaker() as db:
                # The status first: a final status commits with the final events, so once it
                # is read final the events read next include them.
                found = (
                    await db.execute(sa.select(Run.status, Run.session_pk).where(Run.id == run_id))
                ).first()
                rows = list(
                    await db.scalars(
                        sa.select(RunEvent)
                        .where(RunEvent.run_id == run_id, RunEvent.seq > after)
                        .order_by(RunEvent.seq)
                    )
                )
            for row in rows:
                after = row.seq
                yield Event(row.seq, row.type, row.data)
                # A pause ends the stream only while the run still waits there: a resumed
                # run's log goes on after it (Last-Event-ID across the pause).
                paused_before = row.type == EventType.RUN_REQUIRES_ACTION and (
                    row is not rows[-1] or (found is not None and found[0] not in WAITING)
                )
                if ends_stream(row.type) and not paused_before:
                    return
            if found is None or found[0] in TERMINAL:
                return
            polls += 1
            if found[0] == RunStatus.RUNNING and polls % REAP_EVERY == 0:
                if await self.orphans.reap(run_id, found[1]):
                    continue  # its final events are stored: read them now
            await asyncio.sleep(FOLLOW_POLL_S)

    async def aclose(self, grace_s: float = 0.0) -> None:
        """Let runs finish for up to ``grace_s``, then interrupt the rest (shutdown)."""
        waiting = [job.done.wait() for job in self.jobs.values()]
        if waiting and grace_s > 0:
            log.info("shutdown: waiting up to %.0fs for %d runs", grace_s, len(waiting))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), grace_s)
        for run_id in list(self.jobs):
            await self.cancel(run_id, "shutdown")
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task
        await self.locks.drain()
        await self.bus.aclose()
