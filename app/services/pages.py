"""Newest-first keyset pagination shared by the list endpoints."""

from __future__ import annotations

from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.errors import BadRequest

T = TypeVar("T")
MAX_LIMIT = 100


async def page(
    db: AsyncSession,
    stmt: sa.Select[Any],
    created: Any,
    ident: Any,
    limit: int,
    after: tuple[Any, Any] | None,
) -> tuple[list[T], bool]:
    """Rows of ``stmt`` newest first after the cursor row ``(created_at, id)``; (rows, has_more)."""
    if after is not None:
        stmt = stmt.where(sa.tuple_(created, ident) < sa.tuple_(*after))
    stmt = stmt.order_by(created.desc(), ident.desc()).limit(limit + 1)
    rows: list[T] = list(await db.scalars(stmt))
    return rows[:limit], len(rows) > limit


def check_limit(limit: int) -> int:
    """``limit`` within 1..100 (the routes' ``Query`` bounds say so first: app.api.pages)."""
    if not 1 <= limit <= MAX_LIMIT:
        raise BadRequest("limit must be between 1 and 100", param="limit", code="invalid_value")
    return limit
