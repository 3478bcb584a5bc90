"""Tenant budgets on the stateless chat path without a database write per request.

A tenant without a token budget (the common case) is remembered as such for ``ttl_s``
(AGENTSTATION_TENANT_BUDGET_TTL_S): its requests read nothing, and their tokens are added up
in memory and written once per ``flush_s`` (AGENTSTATION_USAGE_FLUSH_S) in one transaction,
and at shutdown. A tenant with a budget is read and charged in the database on every request,
so every replica enforces it from the same counter. What remains stale: a budget set on a tenant
known to be unlimited takes effect on other processes within ``ttl_s``; ``tokens_used`` of
unlimited tenants lags by up to ``flush_s``, and a killed process (SIGKILL, OOM) loses that
last interval's count; a failed flush is retried. Model calls of a tenant with a budget are
reserved and settled one by one in the database (``meter``, app/ops/token_holds.py), so the
budget is exact across replicas under concurrency; their tokens are then not charged again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from sqlalchemy.ext.asyncio import AsyncSession, async_sessionmaker

from agents.llms.base import CallMeter
from app.cache import TTLCache
from app.ops.budget_store import BUDGET_CACHE_KIND, charge_tenant, tenant_budget
from app.ops.token_holds import TokenMeter

log = logging.getLogger(__name__)


class TenantUsage:
    """Per-replica tenant budget figures and batched usage counters."""

    def __init__(
        self,
        sessions: async_sessionmaker[AsyncSession],
        ttl_s: float = 2.0,
        flush_s: float = 1.0,
        max_tenants: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.sessions = sessions
        self.flush_s = flush_s
        self.unlimited: TTLCache[str, bool] = TTLCache(BUDGET_CACHE_KIND, ttl_s, max_tenants, clock)
        self.pending: dict[str, int] = {}  # tenant -> tokens not written yet
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        # Calls of tenants with a budget, reserved and settled in the database (bound at start).
        self.meter: TokenMeter | None = None

    def calls(self, tenant_id: str) -> CallMeter | None:
        """The tenant's calls counted against its budget in the database (None: not bound)."""
        return self.meter.for_tenant(tenant_id) if self.meter is not None else None

    async def figures(self, tenant_id: str) -> tuple[int | None, int]:
        """(budget, tokens used) of a tenant; (None, 0) when it has no budget."""
        if self.unlimited.get(tenant_id):
            return None, 0
        async with self.sessions() as db:
            limit, used = await tenant_budget(db, tenant_id)
        if limit is None:
            self.unlimited.put(tenant_id, True)
            return None, 0
        # Tokens counted here while the tenant still looked unlimited count too.
        return limit, used + self.pending.get(tenant_id, 0)

    async def charge(self, tenant_id: str, tokens: int, limited: bool) -> None:
        """Count a finished request's tokens: now for a tenant with a budget, else batched."""
        if tokens <= 0:
            return
        if limited or self.flush_s <= 0 or self._closed:
            async with self.sessions() as db, db.begin():
                await charge_tenant(db, tenant_id, tokens)
            return
        self.pending[tenant_id] = self.pending.get(tenant_id, 0) + tokens
        if self._task is None:
            self._task = asyncio.create_task(self._flush_loop(), name="tenant-usage-flush")

    async def flush(self) -> None:
        """Write the batched counters in one transaction (kept for the next try if it fails)."""
        if not self.pending:
            return
        batch, self.pending = self.pending, {}
        try:
            async with self.sessions() as db, db.begin():
                # One order on every replica: concurrent flushes cannot deadlock on the rows.
                for tenant_id in sorted(batch):
                    await charge_tenant(db, tenant_id, batch[tenant_id])
        except BaseException:
            for tenant_id, tokens in batch.items():
                self.pending[tenant_id] = self.pending.get(tenant_id, 0) + tokens
            raise

    async def _flush_loop(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stop.wait(), self.flush_s)
            try:
                await self.flush()
            except Exception:  # e.g. the database is down: keep counting, retry next time
                log.warning("tenant usage flush failed; retrying", exc_info=True)

    async def aclose(self) -> None:
        """Stop the flusher and write what is left (later charges are written at once)."""
        self._closed = True
        self._stop.set()
        if self._task is not None:
            await self._task  # ends after its current flush, never cancelled inside one
        try:
            await self.flush()
        except Exception:
            log.exception("tenant usage lost at shutdown: %s", self.pending)
