"""Token budgets per session (agent spec) and per tenant (API key), checked per model call.

The runtime builds a ``RunBudget`` from what the session and tenant used before the run plus
the run's live ``usage_scope`` counter, refuses the run up front when a budget is spent
(``preflight``: 429 ``budget_exceeded``), and binds it with ``budget_scope`` around the agent
call: ``budget_scope`` binds its check as an ``agents.llms.base.call_guard``, which every
model's ``astream`` runs before generating, so a run that crosses a budget stops at the next
call boundary with what it produced so far (no model handle is wrapped for it). A tenant's
budget is also counted in the database call by call when a ``meter`` is bound
(app/ops/token_holds.py): exact over a fleet of replicas.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from agents.llms.base import CallMeter, Usage, call_guard, call_meter
from app.ops.errors import error_envelope
from app.schemas.common import Int

STOP_REASON = "budget_exceeded"
ERROR_CODE = "budget_exceeded"


class BudgetExceeded(Exception):
    """A session or tenant token budget is spent."""

    def __init__(self, scope: str, limit: int, used: int) -> None:
        super().__init__(f"{scope} token budget exhausted: used {used} of {limit} tokens")
        self.scope = scope
        self.limit = limit
        self.used = used

    def envelope(self) -> dict[str, Any]:
        """The OpenAI error envelope for the 429 response."""
        return error_envelope(str(self), "tokens", ERROR_CODE)


class BudgetSpec(BaseModel):
    """An agent spec's ``budget``: total tokens each session of the agent may use."""

    model_config = ConfigDict(extra="forbid", strict=True)

    max_total_tokens: Int = Field(ge=1, le=10**12)


def session_token_budget(spec: Mapping[str, Any]) -> int | None:
    """``spec["budget"]["max_total_tokens"]`` if set (a positive int), else ``None``."""
    budget = spec.get("budget")
    if not isinstance(budget, Mapping):
        return None
    limit = budget.get("max_total_tokens")
    if limit is None:
        return None
    if isinstance(limit, bool) or not isinstance(limit, int) or limit <= 0:
        raise ValueError("budget.max_total_tokens must be a positive integer")
    return limit


@dataclass(frozen=True)
class Limit:
    """One budget: ``limit`` total tokens for ``scope``, of which ``used`` before this run."""

    scope: str  # "session" | "tenant"
    limit: int
    used: int


@dataclass
class RunBudget:
    """The budgets a run is subject to, and (live) the run's own usage so far."""

    limits: list[Limit] = field(default_factory=list)
    usage: Usage | Callable[[], Usage] = field(default_factory=Usage)
    # The tenant's budget counted in the database call by call (app.ops.token_holds): every
    # model call reserves from it and settles with its usage. None: checked here only.
    meter: CallMeter | None = None

    @classmethod
    def build(
        cls,
        usage: Usage | Callable[[], Usage],
        session_limit: int | None = None,
        session_used: int = 0,
        tenant_limit: int | None = None,
        tenant_used: int = 0,
        meter: CallMeter | None = None,
    ) -> RunBudget:
        """A budget from optional session and tenant limits (``None`` = unlimited); ``meter``:
        the tenant's shared count, bound only when the tenant has a limit."""
        limits = []
        if session_limit is not None:
            limits.append(Limit("session", session_limit, session_used))
        if tenant_limit is not None:
            limits.append(Limit("tenant", tenant_limit, tenant_used))
        return cls(limits=limits, usage=usage, meter=meter if tenant_limit is not None else None)

    def spent(self) -> int:
        """Tokens this run used so far."""
        usage = self.usage() if callable(self.usage) else self.usage
        return usage.total_tokens

    def exhausted(self) -> Limit | None:
        """The first budget used up (before + this run >= limit), if any."""
        spent = self.spent()
        return next((lim for lim in self.limits if lim.used + spent >= lim.limit), None)

    def check(self) -> None:
        """Raise ``BudgetExceeded`` if any budget is used up."""
        limit = self.exhausted()
        if limit is not None:
            raise BudgetExceeded(limit.scope, limit.limit, limit.used + self.spent())

    preflight = check  # before the run starts: the same test with the run's usage at zero


_current: contextvars.ContextVar[RunBudget | None] = contextvars.ContextVar(
    "agentstation_run_budget", default=None
)


@contextmanager
def budget_scope(budget: RunBudget) -> Iterator[RunBudget]:
    """Make ``budget`` the one every model call made inside checks first."""
    token = _current.set(budget)
    try:
        with call_guard(budget.check):
            if budget.meter is None:
                yield budget
            else:
                with call_meter(budget.meter):
                    yield budget
    finally:
        _current.reset(token)


def check_current_budget() -> None:
    """Raise ``BudgetExceeded`` if this task runs under a spent budget (no budget: no-op)."""
    budget = _current.get()
    if budget is not None:
        budget.check()
