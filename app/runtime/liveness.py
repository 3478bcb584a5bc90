"""Replica liveness: each replica beats in the database and sweeps the runs of dead ones.

Every ``beat_s`` a replica writes its heartbeat (``replicas.beat_at``, its state ``live`` or
``draining``) and looks for dead replicas (app/runtime/store/fleet.py: a stale heartbeat, or
no database connection left). For each dead replica it closes its active runs, found by
``runs.replica``:

- a ``running`` run is closed ``interrupted`` (stop reason ``replica_lost``): a dead replica's
  connections, and so its session locks, are gone (a stale one's are ended first, ``fence``);
- a ``queued`` run (it was waiting for its session on the dead replica) is closed
  ``interrupted`` too: it is *failed*, not taken up, because its turn's request was answered
  (or streamed) by the dead replica, which alone knew how to deliver it. Its client sees the
  run's terminal event (``run.cancelled`` with status ``interrupted``) and sends the turn again.

Each close writes the run's terminal event (and a ``run.gap`` for ids its owner may have sent),
so followers through any replica end their streams.

The heartbeat (PostgreSQL) comes from a thread with its own event loop and connection
(``FleetStore.heartbeat_thread``), so neither a busy event loop (a long ready queue on a
loaded host) nor a full connection pool delays it: a 10 s TTL on the event loop's own beats
fenced live replicas at load average 44, which is why it was raised to 60 s (commit 3a5f174).
The thread does not say "alive now" but "alive as of the event loop's last tick"
(``beat_at = now() - lag``; the loop ticks every 0.5 s), so a replica whose event loop hangs
(a call that never yields) looks dead after ``ttl_s`` as surely as one stopped (SIGSTOP: the
thread stops too) or gone. With the defaults (``beat_s`` 1, ``ttl_s`` 10) a SIGKILLed or
crashed replica's runs are closed within about ``beat_s`` (its connections close with it), a
hung or stopped one's within about ``ttl_s + 2 beat_s`` (≤ 12 s), a vanished host's within
about 11 s (its connections' TCP keepalive, app/db/engine.py, or the TTL, whichever is first).
Concurrent sweeps by several replicas are safe: closing a run is a conditional update of its
row (``RunManager.close_orphan``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import time
from collections.abc import Awaitable, Callable

from app.runtime.store.fleet import FleetStore
from app.schemas.vocab import CancelMode

log = logging.getLogger(__name__)

LOST = CancelMode.REPLICA_LOST  # the stop reason of a dead replica's runs


def new_replica_id(name: str = "") -> str:
    """A new id for this process: random, then ``name`` or the host name (at most 45
    characters, so ``agentstation:<id>`` fits PostgreSQL's 63-byte ``application_name``)."""
    return f"{secrets.token_hex(6)}-{(name or socket.gethostname())[:32]}"


class Liveness:
    """This replica's heartbeat and its sweep of dead replicas' runs."""

    def __init__(
        self,
        fleet: FleetStore,
        close_run: Callable[[str, CancelMode], Awaitable[bool]],
        replica: str,
        draining: Callable[[], bool],
        beat_s: float = 2.0,
        ttl_s: float = 60.0,
        release_holds: Callable[[str], Awaitable[int]] | None = None,
    ) -> None:
        self.fleet = fleet
        self.close_run = close_run  # RunManager.close_orphan
        self.replica = replica
        self.draining = draining
        self.beat_s = beat_s
        self.ttl_s = ttl_s
        self.release_holds = release_holds  # a dead replica's token holds (app.ops.token_holds)
        self._task: asyncio.Task[None] | None = None
        self._ticker: asyncio.Task[None] | None = None
        self.progress = time.monotonic()  # the event loop's last tick
        self._heartbeat = fleet.heartbeat_thread(replica)

    async def start(self) -> None:
        """Register (the first beat), then beat and sweep in the background: the beat from
        a thread of its own (PostgreSQL), as of the event loop's last tick."""
        await self.fleet.beat(self.replica, self.state)
        self._ticker = asyncio.create_task(self._tick())
        if self._heartbeat is not None:
            self._heartbeat.start(lambda: self.state, lambda: self.progress, self.beat_s)
        self._task = asyncio.create_task(self._loop())

    async def _tick(self) -> None:
        """The event loop's progress, as the heartbeat thread reports it: a loop that runs
        nothing (hung in a call that never yields, stopped) stops ticking."""
        period = min(0.5, self.beat_s / 2)
        while True:
            self.progress = time.monotonic()
            await asyncio.sleep(period)

    async def recovering(self, session_pk: str) -> bool:
        """Whether an active run of the session belongs to a dead replica (being closed)."""
        return await self.fleet.orphaned(session_pk, self.replica, self.ttl_s)

    @property
    def state(self) -> str:
        return "draining" if self.draining() else "live"

    async def aclose(self) -> None:
        """Stop beating and remove this replica's row (its runs were ended by then)."""
        for task in (self._task, self._ticker):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        if self._heartbeat is not None:
            await asyncio.to_thread(self._heartbeat.stop)
        with contextlib.suppress(Exception):
            await self.fleet.leave(self.replica)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.beat_s)
            try:
                if self._heartbeat is None:
                    await self.fleet.beat(self.replica, self.state)
                await self.sweep()
            except Exception:  # the database is away: beat again next time
                log.warning("replica heartbeat or sweep failed", exc_info=True)

    async def sweep(self) -> int:
        """Close the active runs of dead replicas; how many were closed."""
        closed = 0
        for dead in await self.fleet.dead_replicas(self.replica, self.ttl_s):
            if dead.stale:
                log.warning("replica %s missed its heartbeats: ending its connections", dead.id)
                await self.fleet.fence(dead.id)
            # Its session locks went with its connections (or with the fence): no lock to
            # take first; a concurrent closer (another replica, a turn's admission) is
            # serialised by the run's row lock in ``close``.
            for run in await self.fleet.active_runs(dead.id):
                closed += await self.close_run(run.id, LOST)
            if await self.fleet.active_runs(dead.id):
                continue  # a lock still held (a fenced backend ending): the next sweep
            if self.release_holds is not None:  # its model calls in flight hold no budget
                await self.release_holds(dead.id)
            await self.fleet.forget(dead.id)
            log.warning("replica %s is gone: its runs were closed", dead.id)
        return closed
