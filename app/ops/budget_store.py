"""Budgets in the database: session usage (sum of its runs), tenant budget and counter."""

from __future__ import annotations

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.cache import invalidate_on_commit
from app.db.models import Run, Tenant

BUDGET_CACHE_KIND = "tenant_budget"  # app.ops.tenant_usage's cache (key: tenant id)


async def session_tokens(db: AsyncSession, session_pk: str) -> int:
    """Total tokens of every run of a session."""
    total = await db.scalar(
        sa.select(
            sa.func.coalesce(sa.func.sum(Run.prompt_tokens + Run.completion_tokens), 0)
        ).where(Run.session_pk == session_pk)
    )
    return int(total or 0)


async def session_usage(db: AsyncSession, session_pk: str) -> tuple[int, int]:
    """(prompt, completion) tokens over every run of a session."""
    row = (
        await db.execute(
            sa.select(
                sa.func.coalesce(sa.func.sum(Run.prompt_tokens), 0),
                sa.func.coalesce(sa.func.sum(Run.completion_tokens), 0),
            ).where(Run.session_pk == session_pk)
        )
    ).one()
    return int(row[0]), int(row[1])


async def tenant_budget(db: AsyncSession, tenant_id: str) -> tuple[int | None, int]:
    """A tenant's (budget, tokens used); unknown tenants have no budget."""
    row = (
        await db.execute(
            sa.select(Tenant.token_budget, Tenant.tokens_used).where(Tenant.id == tenant_id)
        )
    ).first()
    return (None, 0) if row is None else (row.token_budget, int(row.tokens_used or 0))


async def charge_tenant(db: AsyncSession, tenant_id: str, tokens: int) -> None:
    """Add a finished run's tokens to its tenant's counter (in the caller's transaction)."""
    if tokens > 0:
        await db.execute(
            sa.update(Tenant)
            .where(Tenant.id == tenant_id)
            .values(tokens_used=Tenant.tokens_used + tokens)
        )


async def set_tenant_budget(db: AsyncSession, tenant_id: str, limit: int | None) -> None:
    """Set (or with ``None`` remove) a tenant's token budget; the tenant must exist."""
    if limit is not None and limit <= 0:
        raise ValueError("a token budget must be a positive number of tokens")
    await db.execute(sa.update(Tenant).where(Tenant.id == tenant_id).values(token_budget=limit))
    invalidate_on_commit(db, BUDGET_CACHE_KIND, tenant_id)
