"""Admission of a session's runs: the multitask strategies (reject, enqueue, interrupt,
rollback) and idempotency are decided by the run store's ``admit`` (one implementation per
database, see app/runtime/store/); here the admission lock of this process, the cancels of the
runs an ``interrupt``/``rollback`` replaces, and the hand-over of the turn's lease to its job."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.ext.asyncio import AsyncSession

from agents.schema import AgentMessage
from app.db.base import new_id, transient, utcnow
from app.db.models import SEQ_BLOCK, Run
from app.db.models import Session as SessionRow
from app.errors import NotFound, SessionBusy, Unavailable
from app.runtime.budgets import BudgetFigures
from app.runtime.jobs import input_message
from app.runtime.messages import dump_message
from app.runtime.orphans import Orphans
from app.runtime.store import RunStore, TurnLease
from app.schemas.agents import AgentSpec
from app.schemas.vocab import CancelMode, MultitaskStrategy, RunStatus

log = logging.getLogger(__name__)


async def _nothing_to_recover(_session_pk: str) -> bool:
    return False


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
    # Set when the session came from a cache: the submission again, its session read afresh
    # (``submit`` calls it when the cached session is gone at admission).
    relookup: Callable[[], Awaitable[Submission]] | None = None
    # Set with ``relookup``: told whether the admission found the session still at the agent
    # and version the cached entry names (True: kept for another while, False: dropped).
    confirmed: Callable[[bool], None] | None = None
    # The new run's id (None: a new ``run_...`` id); the Responses API names runs ``resp_...``.
    run_id: str | None = None


# Starts an admitted run's job: (submission, run, memory revision read at admission or None,
# the turn's lease: the job takes what it holds, inline, what ``Preparer`` made or None).
Starter = Callable[[Submission, Run, int | None, TurnLease, bool, Any], None]
# Makes what a submission's run needs before its model call (its agent) while the admission's
# round trip is in flight; stores and starts nothing (a refused admission drops it).
Preparer = Callable[[Submission], Any]


class _Ahead:
    """``prepare(sub)``, run by the event loop while the admission waits for the database
    (scheduled, not awaited: it runs at the admission's first suspension, and not at all when
    the admission completes without one, as on SQLite, where there is nothing to overlap)."""

    def __init__(self, prepare: Preparer, sub: Submission) -> None:
        self.prepare, self.sub = prepare, sub
        self.made: Any = None
        self.handle = asyncio.get_running_loop().call_soon(self._run)

    def _run(self) -> None:
        try:
            self.made = self.prepare(self.sub)
        except Exception:  # built again by the run's task, which reports the error
            log.debug("preparing a run ahead of its admission failed", exc_info=True)

    def take(self) -> Any:
        """What was made (None: nothing, and it will not run now)."""
        self.handle.cancel()
        made, self.made = self.made, None
        return made


class Admissions:
    """Decides, through the store, whether a session takes a new run now, later (queued) or
    not (409), and starts it with ``start``; earlier runs an ``interrupt``/``rollback``
    replaces go with ``cancel``."""

    def __init__(
        self,
        store: RunStore,
        orphans: Orphans,
        cancel: Callable[[str, CancelMode], Awaitable[None]],
        start: Starter,
    ) -> None:
        self.store = store
        self.locks = store.locks
        self.orphans = orphans
        self.cancel = cancel
        self.start = start
        # Builds a run's agent while its admission is in flight (None: when its turn begins).
        self.prepare: Preparer | None = None
        # Whether this replica drains (SIGTERM): new turns get 503 ``draining`` (app/ops/drain.py).
        self.draining: Callable[[], bool] = lambda: False
        # Whether a session's active run belongs to a dead replica (app/runtime/liveness.py).
        self.recovering: Callable[[str], Awaitable[bool]] = _nothing_to_recover

    async def submit(
        self, sub: Submission, lease: TurnLease, inline: bool = False
    ) -> tuple[Run, bool]:
        """Create (or, with a known Idempotency-Key, find) the run; returns (run, created).
        ``lease`` is the turn's (its lookup's connection on PostgreSQL): a started job takes
        what it holds; the caller's ``async with lease`` lets go of the rest."""
        if self.draining():
            raise Unavailable(
                "this replica is shutting down and takes no new turns; retry", code="draining"
            )
        try:
            return await self._submit(sub, lease, inline)
        except SessionBusy:
            # Busy with a run whose replica died? Close it (as recovery would) and try again.
            if not await self.orphans.reap_session(sub.session.pk):
                await self._recovering(sub.session.pk)
                raise
        except NotFound:
            if sub.relookup is None:
                raise
            # A cached session gone (deleted, maybe created again): look it up afresh.
            return await self.submit(await sub.relookup(), lease, inline)
        try:
            return await self._submit(sub, lease, inline)
        except SessionBusy:
            await self._recovering(sub.session.pk)
            raise

    async def _recovering(self, session_pk: str) -> None:
        """503 (not 409) while the session is busy with a run of a dead replica: a live
        replica closes it within seconds (app/runtime/liveness.py), then a retry passes."""
        if await self.recovering(session_pk):
            raise Unavailable(
                "the session's last run was on a replica that stopped and is being closed; retry",
                code="session_recovering",
            ) from None

    async def _submit(self, sub: Submission, lease: TurnLease, inline: bool) -> tuple[Run, bool]:
        async with self.locks.admission(sub.session.pk):
            # The agent is built while the admission's round trip is in flight; the model is
            # called only by the run's job, started below once the run is admitted. A refused
            # admission (busy, a known Idempotency-Key, gone) drops what was built.
            ahead = _Ahead(self.prepare, sub) if self.prepare is not None else None
            try:
                admitted = await self.store.admit(lease, new_run(sub), sub.strategy)
            finally:
                prepared = ahead.take() if ahead is not None else None
            run = admitted.run
            if not admitted.created:
                return run, False
            if sub.confirmed is not None and admitted.current is not None:
                sub.confirmed(admitted.current)
            if sub.strategy in (MultitaskStrategy.INTERRUPT, MultitaskStrategy.ROLLBACK):
                mode = (
                    CancelMode.INTERRUPT
                    if sub.strategy == MultitaskStrategy.INTERRUPT
                    else CancelMode.ROLLBACK
                )
                for run_id in admitted.active:
                    await self.cancel(run_id, mode)
            self.start(sub, run, admitted.rev, lease, inline, prepared)
        return run, True

    @asynccontextmanager
    async def writing_memory(self, session_pk: str, session_id: str) -> AsyncIterator[AsyncSession]:
        """A transaction that may replace the session's memory (PUT, reset), admitted like a
        run: under the session's admission lock (on PostgreSQL across replicas), and refused
        with 409 ``session_busy`` while a run of the session is queued, running or waiting for
        approval, so a turn never loads, or appends to, a memory replaced under it."""
        for attempt in (1, 2):
            async with self.locks.admission(session_pk):
                async with self.store.idle_session(session_pk) as db:
                    if db is not None:
                        yield db
                        return
            # Busy with a run whose replica died? Close it (as recovery would), then retry.
            if attempt == 2 or not await self.orphans.reap_session(session_pk):
                raise SessionBusy(session_id)


def new_run(sub: Submission) -> Run:
    """The transient Run of a submission, ``running`` (the store's ``admit`` makes it
    ``queued`` when it must wait for the session)."""
    # Parsed once (a message is taken as it is: the caller made it for this turn); the job
    # takes it from ``sub.message``.
    message = sub.message
    if not isinstance(message, AgentMessage):
        sub.message = message = input_message(message)
    now = utcnow()
    return transient(
        Run,
        id=sub.run_id or new_id("run"),
        tenant_id=sub.tenant_id,
        session_pk=sub.session.pk,
        session_id=sub.session.id,
        agent=sub.agent_name,
        agent_version=sub.session.agent_version,
        status=RunStatus.RUNNING,
        stop_reason=None,
        input=dump_message(message),
        output=None,
        error=None,
        options=sub.options or {},
        prompt_tokens=0,
        completion_tokens=0,
        idempotency_key=sub.idempotency_key,
        created_at=now,
        started_at=now,
        finished_at=None,
        seq_reserved=SEQ_BLOCK,
        pending=None,  # PostgreSQL's admission leaves it to the column default
    )
