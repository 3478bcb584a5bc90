"""The run store on PostgreSQL: a turn's statements sent straight to asyncpg (``pg_sql.py``),
one round trip each, on the turn's ``TurnLease`` connection: the lookup, the admission
(``agentstation_admit``: multitask rule, Idempotency-Key, insert and the session's run lock
in one server-side function) and the run's end (one statement, which also releases the run
lock at its commit)."""

from __future__ import annotations

import json
import logging
from typing import Any

from app.db import raw
from app.db.base import transient
from app.db.models import Run
from app.db.models import Session as SessionRow
from app.errors import NotFound, SessionBusy
from app.runtime.store import pg_sql
from app.runtime.store.base import (
    Admitted,
    Found,
    NewSession,
    RunEnd,
    RunStore,
    SessionNotFound,
    agent_spec_of,
    pinned,
)
from app.runtime.store.locks import TurnLease, advisory_key
from app.runtime.store.reads import reading
from app.schemas.agents import AgentSpec
from app.schemas.vocab import MultitaskStrategy, RunStatus

log = logging.getLogger(__name__)


class PgRunStore(RunStore):
    """``RunStore`` on PostgreSQL."""

    async def lookup(self, lease: TurnLease, tenant_id: str, session_id: str) -> Found:
        async with lease.using() as pg:
            found = await raw.fetchrow(pg, pg_sql.LOOKUP, tenant_id, session_id)
            if found is None:
                raise SessionNotFound(f"session {session_id!r} not found", param="id")
            (pk, tenant, sid, agent_id, version, metadata, created, updated, rev) = found[:9]
            name, raw_spec, budget, used = found[9:]
            spec = pinned(agent_id, version, raw_spec)
            session_used = 0
            if spec.budget is not None and spec.budget.max_total_tokens is not None:
                session_used = int((await raw.fetchrow(pg, pg_sql.SESSION_TOKENS, pk))[0])
        row = transient(
            SessionRow,
            pk=pk,
            tenant_id=tenant,
            id=sid,
            agent_id=agent_id,
            agent_version=version,
            metadata_=metadata,
            created_at=created,
            updated_at=updated,
            memory_rev=rev,
        )
        return Found(row, name, spec, budget, int(used or 0), session_used)

    async def admit(self, lease: TurnLease, run: Run, strategy: str) -> Admitted:
        # The run slot first (never waiting for one while holding a pooled connection); it
        # goes back with the connection unless the admission takes the run lock.
        take = lease.slot = await self.locks.try_take_slot()
        lease.key = advisory_key(run.session_pk)
        async with lease.using() as pg:
            lease.locked = None  # unknown until the function returns
            got = await pg_sql.admit(
                pg,
                run,
                strategy == MultitaskStrategy.REJECT,
                take,
                advisory_key("admit:" + run.session_pk),
                lease.key,
                wait_busy=strategy == MultitaskStrategy.ENQUEUE,
            )
            lease.locked = got is not None and got.status == RunStatus.RUNNING
        if not lease.locked:
            await lease.release()  # back to the pool, with the slot
        if got is None:
            raise NotFound(f"session {run.session_id!r} not found", param="id")
        if got.status is None:
            raise SessionBusy(run.session_id)
        if got.status == "existing":
            assert got.found is not None
            async with reading(self.engine, self.sessionmaker) as db:
                earlier = await db.get(Run, got.found)
            assert earlier is not None  # runs are deleted only with their tenant or session
            return Admitted(earlier, False, None, [])
        if not lease.locked:  # behind another run (or its lock is still held elsewhere)
            run.status, run.started_at = RunStatus.QUEUED, None
            return Admitted(run, True, None, got.active, got.current)
        return Admitted(run, True, got.rev, got.active, got.current)

    async def create_session(self, new: NewSession) -> tuple[str, int, AgentSpec]:
        metadata = json.dumps(new.metadata) if new.metadata else "{}"
        args: tuple[Any, ...] = (new.pk, new.tenant_id, new.id, new.agent, metadata, new.at)
        sql = pg_sql.CREATE_SESSION
        if new.memory:
            sql, args = pg_sql.CREATE_SESSION_MEMORY, (*args, pg_sql.dumps(list(new.memory)))
        async with raw.pooled(self.engine) as pg:
            got = await raw.fetchrow(pg, sql, *args)
        if got is None:
            raise new.unknown_agent()
        if not got[3]:
            raise new.exists()
        return got[0], got[1], agent_spec_of(got[0], got[1], got[2])

    async def store_end(self, lease: TurnLease | None, end: RunEnd) -> None:
        messages = [{"key": r["key"], "index": r["index"], "data": r["data"]} for r in end.rows]
        args = (end.run, messages, end.rewrite, end.events, end.charge, end.at)
        if lease is None or lease.conn is None or lease.broken:
            async with raw.pooled(self.engine) as pg:
                await pg_sql.store_end(pg, *args, seq_reserved=end.seq_reserved)
            return
        async with lease.using() as pg:
            # Its commit also releases the session's run lock (no statement of its own).
            held = await pg_sql.store_end(
                pg,
                *args,
                unlock_key=lease.key if lease.locked else None,
                seq_reserved=end.seq_reserved,
            )
        if lease.locked:
            if not held:
                log.warning("run %s: the session's run lock was not held at its end", end.run.id)
            lease.locked = False  # released: the connection goes back to the pool as is
