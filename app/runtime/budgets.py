"""The budget figures a run starts with, read once (at submission, or when a queued run starts)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from sqlalchemy.ext.asyncio import AsyncSession

from agents.llms.base import CallMeter, Usage
from app.ops.budget import BudgetSpec, RunBudget
from app.ops.budget_store import session_tokens, tenant_budget


@dataclass(frozen=True)
class BudgetFigures:
    """Session and tenant limits (None = unlimited) with the tokens used before the run."""

    session_limit: int | None = None
    session_used: int = 0
    tenant_limit: int | None = None
    tenant_used: int = 0

    def budget(
        self, usage: Usage | Callable[[], Usage], meter: CallMeter | None = None
    ) -> RunBudget:
        """The run's budget, ``usage`` being its own (live) usage; ``meter``: the tenant's
        calls counted in the database (app.ops.token_holds), used when it has a limit."""
        return RunBudget.build(
            usage,
            self.session_limit,
            self.session_used,
            self.tenant_limit,
            self.tenant_used,
            meter,
        )

    def preflight(self) -> None:
        """Raise ``BudgetExceeded`` (429 ``budget_exceeded``) if a new run could not start."""
        self.budget(Usage()).preflight()


async def session_figures(
    db: AsyncSession,
    session_pk: str,
    spec_budget: BudgetSpec | None,
    tenant_limit: int | None,
    tenant_used: int,
) -> BudgetFigures:
    """Figures from a tenant row already read; the session's usage only when it has a limit."""
    limit = spec_budget.max_total_tokens if spec_budget is not None else None
    used = await session_tokens(db, session_pk) if limit is not None else 0
    return BudgetFigures(limit, used, tenant_limit, tenant_used)


async def read_figures(
    db: AsyncSession, tenant_id: str, session_pk: str, spec_budget: BudgetSpec | None
) -> BudgetFigures:
    """Read the figures afresh (a run that waited for its session)."""
    tenant_limit, tenant_used = await tenant_budget(db, tenant_id)
    return await session_figures(db, session_pk, spec_budget, tenant_limit, tenant_used)
