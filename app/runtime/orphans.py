"""Runs left active by a dead process: closed at start-up (``recover``) or, on PostgreSQL, taken
over by a live replica (``reap``) when one follows them or finds their session busy.

A ``running`` run always holds its session's run lock (an advisory lock of its process's
connection; see app/runtime/store/locks.py), so a ``running`` run whose lock nobody holds belongs to
a dead replica. Closing it numbers its events after every id its owner may have sent
(``Run.seq_reserved``), and names with a ``run.gap`` event the ids that may be lost.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.base import utcnow
from app.db.models import Message, Run, RunEvent
from app.runtime.events import gap_event
from app.runtime.store.locks import SessionLocks
from app.runtime.store.rows import bump_memory_rev
from app.runtime.writes import WriteGate
from app.schemas.vocab import ACTIVE, TERMINAL, WAITING, EventType, RunStatus

# Modes that end a run ``cancelled`` (the others: ``interrupted``).
CANCELLED_MODES = ("cancelled", "rollback", "approval_timeout")


class Orphans:
    """Closes runs no live process owns."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        writes: WriteGate,
        locks: SessionLocks,
        owned: Callable[[str], bool],
        public: Callable[[Run], dict[str, Any]],
    ) -> None:
        self.sessionmaker = sessionmaker
        self.writes = writes
        self.locks = locks
        self.owned = owned  # whether this process runs the run
        self.public = public  # a run's API shape (its final event carries it)

    async def close(self, run_id: str, mode: str, waiting_only: bool = False) -> bool:
        """Close an active run no process of ours owns; True if it did. ``waiting_only``:
        only a run still waiting for approval (not one resumed meanwhile, perhaps elsewhere)."""
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
            run.status = RunStatus.CANCELLED if mode in CANCELLED_MODES else RunStatus.INTERRUPTED
            run.stop_reason, run.finished_at = mode, utcnow()
            stored = (
                await db.scalar(
                    sa.select(sa.func.max(RunEvent.seq)).where(RunEvent.run_id == run_id)
                )
                or 0
            )
            seq = max(stored, run.seq_reserved)
            gap = gap_event(stored, run.seq_reserved, mode)
            events = [gap] if gap is not None else []
            events.append((EventType.RUN_CANCELLED, {"run": self.public(run)}))
            for offset, (type_, data) in enumerate(events, 1):
                db.add(RunEvent(run_id=run_id, seq=seq + offset, type=type_, data=data))
            run.seq_reserved = seq + len(events)
        return True

    async def reap(self, run_id: str, session_pk: str, mode: str = "replica_lost") -> bool:
        """Close ``run_id`` if it is ``running`` but nobody holds its session (its replica
        died: ``replica_lost``, as the liveness sweep says too); True if it did. On SQLite
        one process runs a database's runs: nothing to do (``recover`` closed what a previous
        process left)."""
        if not self.locks.postgres or self.owned(run_id):
            return False
        async with self.locks.try_hold(session_pk) as free:
            return free and await self.close(run_id, mode)

    async def reap_session(self, session_pk: str) -> bool:
        """``reap`` every running run of the session; True if one was closed."""
        if not self.locks.postgres:
            return False
        async with self.sessionmaker() as db:
            running = list(
                await db.scalars(
                    sa.select(Run.id).where(
                        Run.session_pk == session_pk, Run.status == RunStatus.RUNNING
                    )
                )
            )
        return any([await self.reap(run_id, session_pk) for run_id in running])

    async def recover(self) -> int:
        """At start-up: mark runs left active by a dead process ``interrupted``; how many."""
        async with self.sessionmaker() as db:
            stale = list(await db.scalars(sa.select(Run).where(Run.status.in_(ACTIVE))))
        count = 0
        for run in stale:
            if self.owned(run.id):
                continue
            async with self.locks.try_hold(run.session_pk) as free:
                if free and await self.close(run.id, "server_restart"):
                    count += 1
        return count
