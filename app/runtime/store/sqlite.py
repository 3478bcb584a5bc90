"""The run store on SQLite: SQLAlchemy Core statements, one write transaction at a time.

Admission is a Python transaction here (PostgreSQL's is a server-side function): the session's
memory revision and busy runs in one query, the multitask rule, the insert. A SQLite database
is one process's: the session is held by ``SessionLocks``' in-process lock, no run lock.
"""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.exc import IntegrityError
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.models import Agent, AgentVersion, Message, Run, Tenant
from app.db.models import Session as SessionRow
from app.errors import NotFound, SessionBusy
from app.ops.budget_store import charge_tenant, session_tokens
from app.runtime.public import columns
from app.runtime.reads import reading
from app.runtime.store.base import (
    EVENTS,
    RUNS,
    Admitted,
    Found,
    RunEnd,
    RunStore,
    SessionNotFound,
    pinned,
)
from app.runtime.store.locks import TurnLease
from app.runtime.store.rows import MESSAGES, bump_memory_rev
from app.schemas.vocab import BUSY, WAITING, RunStatus


class SqliteRunStore(RunStore):
    """``RunStore`` on SQLite."""

    async def lookup(self, lease: TurnLease, tenant_id: str, session_id: str) -> Found:
        async with reading(self.engine, self.sessionmaker) as db:
            found = (
                await db.execute(
                    sa.select(
                        SessionRow,
                        Agent.name,
                        AgentVersion.spec,
                        Tenant.token_budget,
                        Tenant.tokens_used,
                    )
                    .join(Agent, Agent.id == SessionRow.agent_id)
                    .outerjoin(
                        AgentVersion,
                        (AgentVersion.agent_id == SessionRow.agent_id)
                        & (AgentVersion.version == SessionRow.agent_version),
                    )
                    .outerjoin(Tenant, Tenant.id == SessionRow.tenant_id)
                    .where(SessionRow.tenant_id == tenant_id, SessionRow.id == session_id)
                )
            ).first()
            if found is None:
                raise SessionNotFound(f"session {session_id!r} not found", param="id")
            row, name, raw_spec, budget, used = found
            spec = pinned(row.agent_id, row.agent_version, raw_spec)
            limited = spec.budget is not None and spec.budget.max_total_tokens is not None
            session_used = await session_tokens(db, row.pk) if limited else 0
        return Found(row, name, spec, budget, int(used or 0), session_used)

    async def admit(self, lease: TurnLease, run: Run, strategy: str) -> Admitted:
        key = run.idempotency_key
        try:
            async with self.writes.hold(), self.sessionmaker() as db, db.begin():
                if key and (earlier := await self._by_key(db, run.tenant_id, key)) is not None:
                    return Admitted(earlier, False, None, [])
                # The session's memory revision and its active runs, in one query.
                rows = (
                    await db.execute(
                        sa.select(SessionRow.memory_rev, Run.id, Run.status)
                        .select_from(SessionRow)
                        .outerjoin(Run, (Run.session_pk == SessionRow.pk) & Run.status.in_(BUSY))
                        .where(SessionRow.pk == run.session_pk)
                        .order_by(Run.created_at)
                    )
                ).all()
                if not rows:
                    raise NotFound(f"session {run.session_id!r} not found", param="id")
                rev = rows[0][0]
                active = [run_id for _, run_id, _ in rows if run_id is not None]
                waiting = any(status in WAITING for _, _, status in rows)
                # A run waiting for a person is never queued behind (enqueue refuses).
                if active and (strategy == "reject" or (waiting and strategy == "enqueue")):
                    raise SessionBusy(run.session_id)
                # An idle session's run is ``running`` from the start (no second write);
                # behind another run it is ``queued`` until that one ends.
                if active:
                    run.status, run.started_at = RunStatus.QUEUED, None
                # A Core insert: the Run object stays in memory as the run's state.
                await db.execute(sa.insert(RUNS).values(columns(run)))
        except IntegrityError:  # a concurrent retry with the same Idempotency-Key won
            earlier = None
            if key:
                async with self.sessionmaker() as db:
                    earlier = await self._by_key(db, run.tenant_id, key)
            if earlier is None:
                raise
            return Admitted(earlier, False, None, [])
        return Admitted(run, True, None if active else rev, active)

    @staticmethod
    async def _by_key(db: AsyncSession, tenant_id: str, key: str) -> Run | None:
        found: Run | None = await db.scalar(
            sa.select(Run).where(Run.tenant_id == tenant_id, Run.idempotency_key == key)
        )
        return found

    async def store_end(self, lease: TurnLease | None, end: RunEnd) -> None:
        run = end.run
        async with self.writes.hold(), self.sessionmaker() as db, db.begin():
            if end.rewrite:
                await db.execute(
                    sa.delete(Message).where(
                        Message.session_pk == run.session_pk, Message.key.in_(end.rewrite)
                    )
                )
            if end.rows:
                await db.execute(sa.insert(MESSAGES), end.rows)
            if end.rows or end.rewrite:
                await bump_memory_rev(db, run.session_pk)
            extra = {"seq_reserved": end.seq_reserved} if end.seq_reserved is not None else {}
            await db.execute(
                sa.update(RUNS)
                .where(RUNS.c.id == run.id)
                .values(
                    status=run.status,
                    stop_reason=run.stop_reason,
                    output=run.output,
                    error=run.error,
                    prompt_tokens=run.prompt_tokens,
                    completion_tokens=run.completion_tokens,
                    finished_at=run.finished_at,
                    pending=run.pending,
                    **extra,
                )
            )
            if end.charge:
                await charge_tenant(db, run.tenant_id, end.charge)
            events = [{"run_id": run.id, "created_at": end.at, **e} for e in end.events]
            await db.execute(sa.insert(EVENTS), events)
