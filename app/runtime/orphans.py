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

from app.db.models import Run
from app.runtime.store import RunStore
from app.schemas.vocab import (
    CancelMode,
    RunStatus,
    cancel_outcome,
)


class Orphans:
    """Closes runs no live process owns (its statements: the run store's)."""

    def __init__(
        self,
        store: RunStore,
        owned: Callable[[str], bool],
        public: Callable[[Run], dict[str, Any]],
    ) -> None:
        self.store = store
        self.locks = store.locks
        self.owned = owned  # whether this process runs the run
        self.public = public  # a run's API shape (its final event carries it)

    async def close(self, run_id: str, mode: str, waiting_only: bool = False) -> bool:
        """Close an active run no process of ours owns; True if it did. ``waiting_only``:
        only a run still waiting for approval (not one resumed meanwhile, perhaps elsewhere).
        Its final status is the mode's (``CancelMode``); nothing of the run is kept."""
        return await self.store.close_run(
            run_id, lambda mode: cancel_outcome(mode)[0], mode, self.public, waiting_only
        )

    async def reap(self, run_id: str, session_pk: str, mode: str = CancelMode.REPLICA_LOST) -> bool:
        """Close ``run_id`` if it is ``running`` but nobody holds its session (its replica
        died: ``replica_lost``, as the liveness sweep says too); True if it did. On SQLite
        one process runs a database's runs: nothing to do (``recover`` closed what a previous
        process left)."""
        if not self.locks.replicas or self.owned(run_id):
            return False
        async with self.locks.try_hold(session_pk) as free:
            return free and await self.close(run_id, mode)

    async def reap_session(self, session_pk: str) -> bool:
        """``reap`` every running run of the session; True if one was closed."""
        if not self.locks.replicas:
            return False
        running = await self.store.run_ids(RunStatus.RUNNING, session_pk=session_pk)
        return any([await self.reap(run_id, session_pk) for run_id in running])

    async def recover(self) -> int:
        """At start-up: mark runs left active by a dead process ``interrupted``; how many."""
        count = 0
        for run_id, session_pk in await self.store.active_runs():
            if self.owned(run_id):
                continue
            async with self.locks.try_hold(session_pk) as free:
                if free and await self.close(run_id, CancelMode.SERVER_RESTART):
                    count += 1
        return count
