"""Retention: a periodic sweep deleting idle finished sessions and old runs' event logs.

A session expires when it has been idle (no update, no run created or finished) for
``session_ttl_s`` and has no queued or running run; deleting it cascades to its memory, runs and
events, and ``on_session_deleted`` then frees its kernel and work directory. Event logs of runs
finished more than ``run_events_ttl_s`` ago are deleted while the runs themselves (status,
output, usage) stay. A TTL of 0 keeps data forever. Every replica may sweep: deletes are
idempotent and work in small batches, so no transaction holds locks for long.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from app.db.base import utcnow
from app.db.models import Run, RunEvent, Session
from app.schemas.vocab import BUSY, TERMINAL

log = logging.getLogger(__name__)

ACTIVE_STATUSES = BUSY  # a run waiting for approval keeps its session
FINAL_STATUSES = TERMINAL
SessionDeleted = Callable[[str, str], Awaitable[None]]  # (tenant_id, session_id)


@dataclass(frozen=True)
class RetentionPolicy:
    """TTLs in seconds (0 = keep forever) and how often to sweep."""

    session_ttl_s: float = 0.0
    run_events_ttl_s: float = 0.0
    interval_s: float = 300.0
    batch_size: int = 500

    @property
    def enabled(self) -> bool:
        """True if anything expires at all."""
        return self.session_ttl_s > 0 or self.run_events_ttl_s > 0


@dataclass
class SweepResult:
    """What one sweep deleted."""

    sessions: int = 0
    run_events: int = 0


def _idle_sessions(cutoff: datetime) -> sa.Select[str, str, str]:
    recent_or_active_run = sa.exists().where(
        Run.session_pk == Session.pk,
        sa.or_(
            Run.status.in_(ACTIVE_STATUSES),
            Run.created_at >= cutoff,
            Run.finished_at >= cutoff,
        ),
    )
    return sa.select(Session.pk, Session.tenant_id, Session.id).where(
        Session.updated_at < cutoff, ~recent_or_active_run
    )


async def sweep_sessions(
    factory: async_sessionmaker[AsyncSession],
    cutoff: datetime,
    batch_size: int = 500,
    on_deleted: SessionDeleted | None = None,
) -> int:
    """Delete sessions idle since before ``cutoff`` (with their memory, runs and events)."""
    total = 0
    while True:
        async with factory() as db, db.begin():
            rows = (await db.execute(_idle_sessions(cutoff).limit(batch_size))).all()
            if not rows:
                return total
            pks = [row.pk for row in rows]
            # Re-check idleness in the DELETE itself: a run may have started since the SELECT.
            deleted_pks = set(
                (
                    await db.scalars(
                        sa.delete(Session)
                        .where(
                            Session.pk.in_(pks),
                            Session.pk.in_(_idle_sessions(cutoff).with_only_columns(Session.pk)),
                        )
                        .returning(Session.pk)
                    )
                ).all()
            )
        total += len(deleted_pks)
        for row in rows:
            if row.pk in deleted_pks and on_deleted is not None:
                await _notify(on_deleted, row.tenant_id, row.id)
        if len(rows) < batch_size:
            return total


async def _notify(on_deleted: SessionDeleted, tenant_id: str, session_id: str) -> None:
    try:
        await on_deleted(tenant_id, session_id)
    except Exception:  # the rows are gone; a kernel that fails to stop is reaped later
        log.exception("cleanup after expiring session %s failed", session_id)


async def sweep_run_events(
    factory: async_sessionmaker[AsyncSession], cutoff: datetime, batch_size: int = 500
) -> int:
    """Delete the event logs of runs that finished before ``cutoff``; keep the runs."""
    total = 0
    while True:
        async with factory() as db, db.begin():
            run_ids = (
                await db.scalars(
                    sa.select(Run.id)
                    .where(
                        Run.status.in_(FINAL_STATUSES),
                        Run.finished_at < cutoff,
                        sa.exists().where(RunEvent.run_id == Run.id),
                    )
                    .limit(batch_size)
                )
            ).all()
            if not run_ids:
                return total
            result = await db.execute(sa.delete(RunEvent).where(RunEvent.run_id.in_(run_ids)))
            total += int(getattr(result, "rowcount", 0) or 0)


async def sweep(
    factory: async_sessionmaker[AsyncSession],
    policy: RetentionPolicy,
    now: datetime | None = None,
    on_session_deleted: SessionDeleted | None = None,
) -> SweepResult:
    """Run one sweep under ``policy``."""
    now = now or utcnow()
    result = SweepResult()
    if policy.run_events_ttl_s > 0:
        cutoff = now - timedelta(seconds=policy.run_events_ttl_s)
        result.run_events = await sweep_run_events(factory, cutoff, policy.batch_size)
    if policy.session_ttl_s > 0:
        cutoff = now - timedelta(seconds=policy.session_ttl_s)
        result.sessions = await sweep_sessions(
            factory, cutoff, policy.batch_size, on_session_deleted
        )
    if result.sessions or result.run_events:
        log.info(
            "retention sweep deleted %d sessions and %d run events",
            result.sessions,
            result.run_events,
            extra={"sessions_deleted": result.sessions, "run_events_deleted": result.run_events},
        )
    return result


class RetentionSweeper:
    """Runs ``sweep`` every ``policy.interval_s`` in a background task."""

    def __init__(
        self,
        factory: async_sessionmaker[AsyncSession],
        policy: RetentionPolicy,
        on_session_deleted: SessionDeleted | None = None,
    ) -> None:
        self.factory = factory
        self.policy = policy
        self.on_session_deleted = on_session_deleted
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        """Start sweeping (no-op when nothing expires)."""
        if self.policy.enabled and self._task is None:
            self._task = asyncio.create_task(self._loop(), name="retention-sweeper")

    async def _loop(self) -> None:
        while True:
            try:
                await sweep(self.factory, self.policy, None, self.on_session_deleted)
            except Exception:  # a database blip must not end retention for good
                log.exception("retention sweep failed")
            await asyncio.sleep(self.policy.interval_s)

    async def aclose(self) -> None:
        """Stop the background task."""
        if self._task is not None:
            self._task.cancel()
            try:
                await self._task
            except asyncio.CancelledError:
                pass
            self._task = None
