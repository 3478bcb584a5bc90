"""Tenant token budgets exact across replicas: every model call reserves, then settles.

A tenant's budget and its counters are one row (``tenants``: ``token_budget``,
``tokens_used``, ``tokens_held``, migration 0011) that every replica changes under the row's
lock (``SELECT … FOR UPDATE``; SQLite: one writer), so concurrent calls on any number of
replicas see one another:

- **reserve**, before a call starts: it holds its worst case, ``estimate(messages, params)``
  (the prompt's UTF-8 bytes / 2, plus 8 a message, plus the call's ``max_new_tokens``), and
  is admitted when ``used + held + its hold <= budget``, or when no other call holds anything
  and ``used < budget`` (a lone call may spend what is left, as on one replica). Otherwise it
  waits for calls in flight to end (polling, up to ``max_wait_s``), and is refused
  (``BudgetExceeded``, the run stops with ``budget_exceeded`` / 429) once ``used >= budget``.
- **settle**, when the call ends (however it ends): its real usage (prompt + completion tokens
  as the model reported them; a call cut short: what it reported, often nothing) is added to
  ``tokens_used`` and its hold given back, in one transaction. Agent runs and stateless
  agent requests of a tenant with a budget are counted here, call by call, and not again at
  their end.

So the fleet overspends a budget only by what a lone call used past it, or by what a call used
beyond its hold (a prompt over 2 tokens a byte). Each hold is also a row of ``token_holds``
with its replica: a replica that dies mid-call leaves holds that the live replica sweeping its
runs gives back (``release_replica``); a replica that starts gives back holds of replicas
that have no row (``release_unowned``; on SQLite, one process, that is every hold).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from dataclasses import dataclass
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.llms.base import Usage
from app.db.base import utcnow
from app.db.models import Replica, Tenant, TokenHold
from app.ops.budget import BudgetExceeded

HOLDS = cast(sa.Table, TokenHold.__table__)
DEFAULT_OUTPUT = 512  # a call that names no max_new_tokens (agents.llms.base's default)


def estimate(messages: list[dict[str, Any]], params: dict[str, Any]) -> int:
    """A call's worst case: its prompt (every token is at least half a byte of its JSON, plus
    a template's few tokens a message) and the most it may generate."""
    prompt = len(json.dumps(messages, ensure_ascii=False, default=str).encode()) // 2
    output = params.get("max_new_tokens") or params.get("max_tokens") or DEFAULT_OUTPUT
    return prompt + 8 * len(messages) + int(output)


@dataclass(frozen=True)
class Hold:
    id: str | None  # None: the tenant had no budget when the call started (nothing held)
    tenant_id: str


class TokenMeter:
    """Reservations against tenants' token budgets, in the database (one per replica)."""

    def __init__(
        self,
        sessionmaker: async_sessionmaker[AsyncSession],
        replica: str,
        writes: Any = None,  # app.runtime.store.writes.WriteGate (SQLite: one writer)
        poll_s: float = 0.02,
        max_wait_s: float = 120.0,
    ) -> None:
        self.sessionmaker = sessionmaker
        self.replica = replica
        self.writes = writes
        self.poll_s = poll_s
        self.max_wait_s = max_wait_s

    def _gate(self) -> Any:
        return contextlib.nullcontext() if self.writes is None else self.writes.hold()

    def for_tenant(self, tenant_id: str) -> TenantCalls:
        """The ``agents.llms.base.CallMeter`` of one tenant's calls."""
        return TenantCalls(self, tenant_id)

    async def reserve(self, tenant_id: str, tokens: int) -> Hold:
        """Hold ``tokens`` of the tenant's budget (waiting for calls in flight when they do
        not fit yet); ``BudgetExceeded`` when the budget is spent."""
        deadline = time.monotonic() + self.max_wait_s
        pause = self.poll_s
        while True:
            async with self._gate(), self.sessionmaker() as db, db.begin():
                row = (
                    await db.execute(
                        sa.select(Tenant.token_budget, Tenant.tokens_used, Tenant.tokens_held)
                        .where(Tenant.id == tenant_id)
                        .with_for_update()
                    )
                ).first()
                if row is None or row.token_budget is None:
                    return Hold(None, tenant_id)
                limit, used, held = (
                    int(row.token_budget),
                    int(row.tokens_used),
                    int(row.tokens_held),
                )
                if used >= limit:
                    raise BudgetExceeded("tenant", limit, used)
                if used + held + tokens <= limit or held <= 0:
                    hold = Hold(secrets.token_hex(16), tenant_id)
                    await db.execute(
                        sa.update(Tenant)
                        .where(Tenant.id == tenant_id)
                        .values(tokens_held=Tenant.tokens_held + tokens)
                    )
                    await db.execute(
                        sa.insert(HOLDS).values(
                            id=hold.id,
                            tenant_id=tenant_id,
                            replica=self.replica,
                            tokens=tokens,
                            created_at=utcnow(),
                        )
                    )
                    return hold
            # Calls in flight hold what is left: one of them may leave room when it ends.
            if time.monotonic() >= deadline:
                raise BudgetExceeded("tenant", limit, used + held)
            await asyncio.sleep(pause)
            pause = min(pause * 2, 0.25)

    async def settle(self, hold: Hold, usage: Usage) -> None:
        """Count the call's tokens and give its hold back (one transaction). A hold already
        given back (its replica was taken for dead) still counts the tokens."""
        tokens = usage.total_tokens
        if hold.id is None:
            return
        async with self._gate(), self.sessionmaker() as db, db.begin():
            held = await db.scalar(
                sa.delete(HOLDS).where(HOLDS.c.id == hold.id).returning(HOLDS.c.tokens)
            )
            await db.execute(
                sa.update(Tenant)
                .where(Tenant.id == hold.tenant_id)
                .values(
                    tokens_used=Tenant.tokens_used + tokens,
                    tokens_held=Tenant.tokens_held - int(held or 0),
                )
            )

    async def _release(self, where: sa.ColumnElement[bool]) -> int:
        async with self._gate(), self.sessionmaker() as db, db.begin():
            rows = (
                await db.execute(
                    sa.delete(HOLDS).where(where).returning(HOLDS.c.tenant_id, HOLDS.c.tokens)
                )
            ).all()
            per_tenant: dict[str, int] = {}
            for tenant_id, tokens in rows:
                per_tenant[tenant_id] = per_tenant.get(tenant_id, 0) + int(tokens)
            for tenant_id in sorted(per_tenant):  # one order on every replica: no deadlock
                await db.execute(
                    sa.update(Tenant)
                    .where(Tenant.id == tenant_id)
                    .values(tokens_held=Tenant.tokens_held - per_tenant[tenant_id])
                )
            return len(rows)

    async def release_replica(self, replica: str) -> int:
        """Give back the holds of a dead replica's calls; how many."""
        return await self._release(HOLDS.c.replica == replica)

    async def release_unowned(self) -> int:
        """Give back holds whose replica has no row (gone before its holds were): at start."""
        known = sa.select(Replica.id)
        return await self._release(
            (HOLDS.c.replica != self.replica) & HOLDS.c.replica.not_in(known)
        )


class TenantCalls:
    """One tenant's model calls against its budget (an ``agents.llms.base.CallMeter``)."""

    def __init__(self, meter: TokenMeter, tenant_id: str) -> None:
        self.meter = meter
        self.tenant_id = tenant_id

    async def reserve(self, messages: list[dict[str, Any]], params: dict[str, Any]) -> Hold:
        return await self.meter.reserve(self.tenant_id, estimate(messages, params))

    async def settle(self, hold: Hold, usage: Usage) -> None:
        await asyncio.shield(self.meter.settle(hold, usage))
