"""The paging query parameters of the list endpoints, declared once (app.services.pages)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Query

from app.services.pages import MAX_LIMIT

# 1..100 items per page (20 by default); after: the last item's id (agents: or name).
Limit = Annotated[int, Query(ge=1, le=MAX_LIMIT)]
After = Annotated[str | None, Query(min_length=1)]
