"""The fleet's statements: replicas' heartbeats, a dead replica's active runs, and which kernel
a session's agent last used (migration 0010). ``create_fleet_store`` picks the implementation
for the database once, at start-up, as ``create_store`` does for the run store.

On PostgreSQL a replica is dead when its heartbeat is older than the TTL or when none of its
connections is left (``pg_stat_activity``: every connection of a replica has the
``application_name`` ``agentstation:<id>``, app/db/engine.py); a SIGKILLed replica's
connections close with it, so it is seen at the next sweep. A replica declared dead while its
connections live on (hung, partitioned) is fenced: its backends are ended, which releases its
session locks and fails its writes. SQLite serves one process: there is no other replica.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession, async_sessionmaker

from app.db.base import utcnow
from app.db.engine import APPLICATION_PREFIX, create_engine
from app.db.models import Replica, Run, SessionKernel
from app.runtime.store.writes import WriteGate
from app.schemas.vocab import ACTIVE, CancelMode

REPLICAS = cast(sa.Table, Replica.__table__)
KERNELS = cast(sa.Table, SessionKernel.__table__)
# pg_stat_activity.application_name keeps at most 63 bytes.
NAME_MAX = 63

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DeadReplica:
    """A replica found dead: ``stale`` when its heartbeat is (it may still be connected)."""

    id: str
    stale: bool


@dataclass(frozen=True)
class OrphanRun:
    """An active run of a dead replica."""

    id: str
    session_pk: str
    status: str


class FleetStore:
    """Statements both databases run alike; ``PgFleetStore`` adds what needs other replicas."""

    def __init__(self, sessionmaker: async_sessionmaker[AsyncSession], writes: WriteGate) -> None:
        self.sessionmaker = sessionmaker
        self.writes = writes

    async def beat(self, replica: str, state: str, lag_s: float = 0.0) -> None:
        """This replica's heartbeat (inserts its row if it has none: at start, or after a
        live replica took it for dead and removed it); ``lag_s``: how long ago its event loop
        last made progress (the beat says "alive as of then")."""

    def heartbeat_thread(self, replica: str) -> Heartbeat | None:
        """A heartbeat from a thread of its own (None: nothing to beat, one process)."""
        return None

    async def leave(self, replica: str) -> None:
        """This replica stops: its row goes."""

    async def dead_replicas(self, me: str, ttl_s: float) -> list[DeadReplica]:
        """Replicas other than ``me`` that are dead."""
        return []

    async def fence(self, replica: str) -> None:
        """End a replica's database connections (its locks go, its writes fail)."""

    async def orphaned(self, session_pk: str, me: str, ttl_s: float) -> bool:
        """Whether an active run of the session belongs to a dead replica (not ``me``), or
        one was closed for that moments ago."""
        return False

    async def active_runs(self, replica: str) -> list[OrphanRun]:
        """``replica``'s queued and running runs."""
        async with self.sessionmaker() as db:
            rows = await db.execute(
                sa.select(Run.id, Run.session_pk, Run.status).where(
                    Run.replica == replica, Run.status.in_(ACTIVE)
                )
            )
            return [OrphanRun(*row) for row in rows.all()]

    async def forget(self, replica: str) -> None:
        """A dead replica's row, once its runs are closed."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            await db.execute(sa.delete(REPLICAS).where(REPLICAS.c.id == replica))

    async def record_kernel(self, session_pk: str, agent: str, owner: str) -> str | None:
        """Record ``owner`` as the session agent's kernel; the owner recorded before, if any.
        One run of a session at a time (its run lock): no other writer of these rows."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            key = (KERNELS.c.session_pk == session_pk) & (KERNELS.c.agent == agent)
            before = await db.scalar(sa.select(KERNELS.c.owner).where(key))
            if before is None:
                await db.execute(
                    sa.insert(KERNELS).values(
                        session_pk=session_pk, agent=agent, owner=owner, started_at=utcnow()
                    )
                )
            else:
                await db.execute(
                    sa.update(KERNELS).where(key).values(owner=owner, started_at=utcnow())
                )
            return before

    async def forget_kernels(self, session_pk: str) -> None:
        """The session's kernels were stopped on purpose (a reset): the next is no restart."""
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            await db.execute(sa.delete(KERNELS).where(KERNELS.c.session_pk == session_pk))


class PgFleetStore(FleetStore):
    """``FleetStore`` on PostgreSQL: heartbeats with the database's clock."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        writes: WriteGate,
        url: str | None = None,
    ) -> None:
        super().__init__(sessionmaker, writes)
        self.url = url  # the heartbeat thread's own connection

    async def beat(self, replica: str, state: str, lag_s: float = 0.0) -> None:
        at = sa.func.now() - sa.func.make_interval(0, 0, 0, 0, 0, 0, max(lag_s, 0.0))
        async with self.sessionmaker() as db, db.begin():
            done = await db.execute(
                sa.update(REPLICAS).where(REPLICAS.c.id == replica).values(beat_at=at, state=state)
            )
            if not getattr(done, "rowcount", 0):
                await db.execute(
                    sa.insert(REPLICAS).values(
                        id=replica, state=state, started_at=sa.func.now(), beat_at=at
                    )
                )

    def heartbeat_thread(self, replica: str) -> Heartbeat | None:
        return Heartbeat(self.url, replica) if self.url is not None else None

    async def leave(self, replica: str) -> None:
        await self.forget(replica)

    @staticmethod
    def _alive(ttl_s: float) -> tuple[sa.ColumnElement[bool], sa.ColumnElement[bool]]:
        """(the replica's heartbeat is stale, it has a connection) for a ``REPLICAS`` row."""
        stale = REPLICAS.c.beat_at < sa.func.now() - sa.func.make_interval(0, 0, 0, 0, 0, 0, ttl_s)
        activity = sa.table("pg_stat_activity", sa.column("application_name"))
        name = sa.func.left(sa.literal(APPLICATION_PREFIX) + REPLICAS.c.id, NAME_MAX)
        return stale, sa.exists().where(activity.c.application_name == name)

    async def orphaned(self, session_pk: str, me: str, ttl_s: float) -> bool:
        stale, connected = self._alive(ttl_s)
        live = sa.exists().where(REPLICAS.c.id == Run.replica, ~stale, connected)
        dead_run = sa.exists().where(
            Run.session_pk == session_pk,
            Run.status.in_(ACTIVE),
            Run.replica.is_not(None),
            Run.replica != me,
            ~live,
        )
        # Or closed moments ago (a sweep or a follower won the race with this turn's own
        # reaping): the session is free now, and a retry passes.
        just_closed = sa.exists().where(
            Run.session_pk == session_pk,
            Run.stop_reason == CancelMode.REPLICA_LOST,
            Run.finished_at > sa.func.now() - sa.func.make_interval(0, 0, 0, 0, 0, 0, 5.0),
        )
        async with self.sessionmaker() as db:
            return bool(await db.scalar(sa.select(dead_run | just_closed)))

    async def dead_replicas(self, me: str, ttl_s: float) -> list[DeadReplica]:
        stale, connected = self._alive(ttl_s)
        async with self.sessionmaker() as db:
            rows = await db.execute(
                sa.select(REPLICAS.c.id, stale).where(REPLICAS.c.id != me, stale | ~connected)
            )
            return [DeadReplica(str(id_), bool(old)) for id_, old in rows.all()]

    async def fence(self, replica: str) -> None:
        activity = sa.table("pg_stat_activity", sa.column("application_name"), sa.column("pid"))
        name = (APPLICATION_PREFIX + replica)[:NAME_MAX]
        async with self.sessionmaker() as db:
            await db.execute(
                sa.select(sa.func.pg_terminate_backend(activity.c.pid)).where(
                    activity.c.application_name == name
                )
            )


class Heartbeat:
    """A replica's heartbeat from a thread with its own event loop and connection, so a busy
    event loop or a full pool never delays it; but it beats "alive as of the event loop's last
    progress" (``progress``: the loop's last tick, ``time.monotonic()``), so a replica whose
    loop hangs looks dead after the TTL as surely as one stopped (SIGSTOP) or gone."""

    def __init__(self, url: str, replica: str) -> None:
        self.url = url
        self.replica = replica
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._failed_at = -1e9

    def start(self, state: Callable[[], str], progress: Callable[[], float], beat_s: float) -> None:
        self._thread = threading.Thread(
            target=asyncio.run,
            args=(self._run(state, progress, beat_s),),
            name="replica-heartbeat",
            daemon=True,
        )
        self._thread.start()

    async def _run(
        self, state: Callable[[], str], progress: Callable[[], float], beat_s: float
    ) -> None:
        # One connection, marked as this replica's (a fence ends it too; it reconnects).
        engine = create_engine(self.url, pool_size=1, max_overflow=0, replica=self.replica)
        store = PgFleetStore(async_sessionmaker(engine), WriteGate(engine))
        try:
            while not self._stop.is_set():
                try:
                    await store.beat(self.replica, state(), time.monotonic() - progress())
                except Exception:  # the database is away (or we were fenced): next beat
                    if time.monotonic() - self._failed_at >= 60:
                        self._failed_at = time.monotonic()
                        log.warning("replica heartbeat failed", exc_info=True)
                self._stop.wait(beat_s)  # this loop serves nothing else
        finally:
            await engine.dispose()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)


def create_fleet_store(
    engine: AsyncEngine, sessionmaker: async_sessionmaker[AsyncSession], writes: WriteGate
) -> FleetStore:
    """The fleet store for ``engine``'s database, chosen once (at start-up)."""
    if engine.dialect.name == "postgresql":
        return PgFleetStore(sessionmaker, writes, engine.url.render_as_string(False))
    return FleetStore(sessionmaker, writes)
