"""RunManager: the facade the app calls for runs (one task per run, independent of requests).

Its rooms: admission and multitask strategies (app/runtime/admission.py), a run's task
(execution.py, its end: finish.py), channels and followers (followers.py), cancels
(cancels.py), runs of dead processes (orphans.py). Here: wiring them, and starting jobs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from agents.llms.base import CallMeter
from agents.schema import AgentMessage
from app.db.models import SEQ_BLOCK, Run
from app.runtime import eager
from app.runtime.admission import Admissions, Submission
from app.runtime.approvals import Resumption
from app.runtime.cancels import Cancels
from app.runtime.events import Event, RunChannel
from app.runtime.execution import execute
from app.runtime.followers import LiveRuns
from app.runtime.jobs import Job, JobDeps, Prepared, input_message, prepare
from app.runtime.memory_cache import Lists, MemoryCache
from app.runtime.notify import CancelBus
from app.runtime.orphans import Orphans
from app.runtime.public import run_public
from app.runtime.registry import ServableAgent
from app.runtime.store import TurnLease, create_store
from app.runtime.store.fleet import FleetStore, create_fleet_store
from app.runtime.store.writes import WriteGate
from app.schemas.agents import AgentSpec
from app.schemas.vocab import CancelMode, EventType

__all__ = ["RunManager", "Submission", "run_public"]

log = logging.getLogger(__name__)


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
        # The run store for this database, chosen once: every statement of a turn.
        self.store = create_store(engine, sessionmaker)
        self.locks = self.store.locks
        self.flush_s = flush_s
        self.store_s = store_s  # mid-run event storage interval (None: every flush)
        self.cancel_timeout_s = cancel_timeout_s
        self._background: set[asyncio.Task[Any]] = set()
        self.bus = CancelBus(engine, self._remote_cancel, enabled=self.store.replicas)
        self.writes = self.store.writes  # SQLite: one write transaction at a time
        self.memory = MemoryCache()  # sessions' loaded memories (checked against memory_rev)
        # Runs of dead processes: closed at start-up, or taken over by this live replica.
        self.orphans = Orphans(self.store, lambda run_id: run_id in self.jobs, run_public)
        self.live = LiveRuns(self.store, self.orphans.reap)
        # The live registry's own dicts (callers and tests read them here).
        self.jobs: dict[str, Job] = self.live.jobs
        self.channels: dict[str, RunChannel] = self.live.channels
        self.finished: dict[str, Run] = self.live.finished
        self.finished_public: dict[str, dict[str, Any]] = self.live.finished_public
        self.cancels = Cancels(
            self.jobs, self.store, self.orphans, self.bus, cancel_timeout_s, self._background
        )
        self.admissions = Admissions(self.store, self.orphans, self.cancel, self._start)
        self.admissions.prepare = self._prepare
        self.deps = JobDeps(
            self.store,
            build_agent,
            self.memory,
            self.live.ended,
            self.live.forget,
        )
        # Runs waiting for a person (all replicas; counted by the approval timeout check) and,
        # for ops, each decision's wait in seconds and outcome ("resumed", "timeout_cancelled").
        self.waiting_count = 0
        self.on_approval: Callable[[float, str], None] | None = None

    @property
    def on_finished(self) -> Callable[[Run], None] | None:
        """Called with each run this process finished (ops: metrics and the "run finished" log)."""
        return self.live.on_finished

    @on_finished.setter
    def on_finished(self, callback: Callable[[Run], None] | None) -> None:
        self.live.on_finished = callback

    def on_approval_decided(self, waited_s: float, outcome: str) -> None:
        """A waiting run was decided about (ops: the time-waited histogram)."""
        if self.on_approval is not None:
            self.on_approval(waited_s, outcome)

    # The surface the lifespan wires (no reach into admissions, orphans or the write gate).
    @property
    def shared(self) -> bool:
        """Whether other processes (replicas) share this database's runs and counters."""
        return self.store.replicas

    @property
    def write_gate(self) -> WriteGate:
        """The database's one write gate (SQLite: one write transaction at a time), for the
        other stores that write the same database (fleet, token holds)."""
        return self.writes

    def fleet_store(self) -> FleetStore:
        """The fleet's statements (heartbeats, dead replicas' runs) for this database."""
        return create_fleet_store(self.engine, self.sessionmaker, self.writes)

    def admit_with(
        self,
        draining: Callable[[], bool] | None = None,
        recovering: Callable[[str], Awaitable[bool]] | None = None,
    ) -> None:
        """What admission asks before a turn: whether this replica drains (503 ``draining``),
        and whether a session's active run belongs to a dead replica (503
        ``session_recovering`` instead of 409)."""
        if draining is not None:
            self.admissions.draining = draining
        if recovering is not None:
            self.admissions.recovering = recovering

    async def close_orphan(self, run_id: str, mode: CancelMode) -> bool:
        """Close an active run no process of ours owns (a dead replica's); True if it did."""
        return await self.orphans.close(run_id, mode)

    def use_token_meter(self, meter: Callable[[str], CallMeter] | None) -> None:
        """Count the calls of tenants with a token budget in the database, call by call
        (``meter(tenant_id)``, app.ops.token_holds) instead of at each run's end."""
        self.deps.meter = meter

    async def submit(
        self, sub: Submission, lease: TurnLease, inline: bool = False
    ) -> tuple[Run, bool]:
        """Create (or, with a known Idempotency-Key, find) the run; returns (run, created).

        ``lease``: the turn's (``RunStore.lease()``, used by its lookup); the run's job takes
        what it holds. ``inline``: the run gets no task of its own; a created run must be run
        at once by the caller, with ``run_here`` (a request that waits for the run's end
        anyway)."""
        return await self.admissions.submit(sub, lease, inline)

    def writing_memory(
        self, session_pk: str, session_id: str
    ) -> AbstractAsyncContextManager[AsyncSession]:
        """A transaction that may replace the session's memory (``Admissions.writing_memory``)."""
        return self.admissions.writing_memory(session_pk, session_id)

    def _prepare(self, sub: Submission) -> Prepared:
        """The agent of a submission's run, built while its admission is in flight."""
        key = f"{sub.tenant_id}:{sub.session.id}"  # ``Job.session_key``
        return prepare(self.build_agent, sub.spec, sub.agent_name, key)

    def _start(
        self,
        sub: Submission,
        run: Run,
        rev: int | None,
        lease: TurnLease,
        inline: bool = False,
        prepared: Prepared | None = None,
    ) -> None:
        """Start the run's task (``inline``: the caller runs it, see ``run_here``); ``rev`` is
        the memory revision read at admission (None when the run is queued: it reads it, and
        the budget, when it starts); the job takes what ``lease`` holds (on PostgreSQL the
        session's run lock when the admission took it) and the agent built meanwhile
        (``prepared``)."""
        channel = RunChannel(run.id, self.store, self.flush_s, SEQ_BLOCK, self.store_s)
        job = Job(
            run=run,
            spec=sub.spec,
            # Parsed by the admission (``new_run``): no second copy (the agent copies it).
            message=(
                sub.message if isinstance(sub.message, AgentMessage) else input_message(sub.message)
            ),
            gen_params=sub.gen_params or {},
            channel=channel,
            rev=rev,
            budget=sub.budget if rev is not None else None,
            charge_later=sub.charge_later,
            instructions=(sub.options or {}).get("instructions"),
            lease=lease.take(),
            prepared=prepared,
        )
        # run.created is the first event (seq 1) of every run.
        channel.seed(EventType.RUN_CREATED, {"run": run_public(run)})
        self._launch(job, inline)

    def _launch(self, job: Job, inline: bool) -> None:
        """Register ``job`` and start its task (``inline``: the caller runs it)."""
        self.live.register(job)
        job.channel.start()
        if inline:
            job.task = asyncio.current_task()
            job.inline = True
            return
        # Its first step runs now, in this iteration of the loop, until it first awaits (the
        # model call sent): started by a streamed request, the turn no longer waits a whole
        # iteration of the loop, with every other stream's callbacks, before it begins; its
        # followers replay its events from the first (issue 25, app/runtime/eager.py).
        started = eager.create(execute(self.deps, job), name=f"run-{job.run_id}")
        job.task = started.task
        if job.lease.conn is not None or job.lease.slot:
            # A task cancelled before its first step never ran execute(), which takes it.
            job.task.add_done_callback(lambda _task: self._release_unclaimed(job))
        started.start()

    async def run_here(self, run_id: str) -> None:
        """Run a job submitted with ``inline=True`` in the calling task, to its end: no task
        of its own and no wake-up of the waiting request. ``cancel`` cancels the calling task
        meanwhile, as it would the run's own task; that cancellation ends here."""
        job = self.jobs[run_id]
        task = asyncio.current_task()
        assert job.inline and job.task is task and task is not None
        try:
            await execute(self.deps, job)
        except asyncio.CancelledError:
            if not job.cancel_sent:
                raise
        finally:
            if job.cancel_sent:  # ours: the caller goes on (and answers with the run's end)
                job.cancel_sent = False
                task.uncancel()

    def _release_unclaimed(self, job: Job) -> None:
        lease = job.lease
        if lease.conn is not None or lease.slot:
            task = asyncio.create_task(self.locks.release(lease))
            self._background.add(task)
            task.add_done_callback(self._background.discard)

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
        channel = RunChannel(run.id, self.store, self.flush_s, run.seq_reserved, self.store_s)
        channel.preload(events)
        self.live.reopen(run.id)
        # Claimed (stored ``queued``): its job marks it running when it holds the session.
        job = Job(
            run=run,
            spec=spec,
            message=input_message(run.input),
            gen_params={},
            channel=channel,
            instructions=(run.options or {}).get("instructions"),
            resume=resumption,
        )
        self._launch(job, inline)
        return job

    def keep_memory(self, session_pk: str, rev: int, lists: Lists) -> None:
        """Keep a session's memory written outside a run (PUT memory) at its revision ``rev``:
        its next turn then neither reads nor re-validates it."""
        self.memory.put(session_pk, rev, lists)

    def stored_seq(self, run_id: str) -> int:
        """The last event id of a run of this process stored so far (0: not ours, or none):
        a stream of its events from there sends only what comes next."""
        channel = self.channels.get(run_id)
        return channel.stored if channel is not None else 0

    async def close_waiting(self, run_id: str, mode: CancelMode) -> bool:
        """End a run that waits for approval (nobody runs it) with ``mode``; False when it no
        longer waits (resumed meanwhile, here or on another replica, or ended)."""
        return await self.orphans.close(run_id, mode, waiting_only=True)

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
        self.cancels.remote_cancel(run_id, mode)

    async def cancel(self, run_id: str, mode: CancelMode = CancelMode.CANCELLED) -> None:
        """Cancel a run (reaching the model call and the tool) and wait for it to stop."""
        await self.cancels.cancel(run_id, mode)

    def cancel_soon(self, run_id: str, mode: CancelMode) -> None:
        """Cancel from a context that is itself being cancelled (a dropped stream)."""
        self.cancels.cancel_soon(run_id, mode)

    async def wait(self, run_id: str) -> None:
        """Until the run has a final status."""
        await self.live.wait(run_id)

    def follow(self, run_id: str, after: int = 0) -> AsyncIterator[Event]:
        """Stored events after ``after``, then live ones, until the run ends."""
        return self.live.follow(run_id, after)

    async def aclose(self, grace_s: float = 0.0) -> None:
        """Let runs finish for up to ``grace_s``, then interrupt the rest (shutdown)."""
        # Coroutines only when awaited (else "coroutine was never awaited" at every shutdown).
        waiting = [job.done.wait() for job in self.jobs.values()] if grace_s > 0 else []
        if waiting:
            log.info("shutdown: waiting up to %.0fs for %d runs", grace_s, len(waiting))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(*waiting), grace_s)
        for run_id in list(self.jobs):
            await self.cancel(run_id, CancelMode.SHUTDOWN)
        for task in list(self._background):
            with contextlib.suppress(BaseException):
                await task
        await self.locks.drain()
        await self.bus.aclose()
