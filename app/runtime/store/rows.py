"""A session's memory as message rows: read the stored state, append a turn's new entries
(only those past what was stored), mark the memory changed (``memory_rev``)."""

from __future__ import annotations

from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents.memory import load_message
from agents.schema import AgentMessage
from app.db.base import utcnow
from app.db.models import Message
from app.db.models import Session as SessionRow
from app.runtime.messages import dump_message, jsonable

SESSIONS = cast(sa.Table, SessionRow.__table__)  # Core statements: no ORM bookkeeping


# A fork's marker row (key ``FORK_KEY``, index 0): the session's memory starts with the first
# ``counts[key]`` entries of session ``parent_pk``'s memory, shared, not copied (a fork at a
# run, app.services.forks). Replacing or resetting the memory deletes the marker with the rows.
FORK_KEY = "~fork"


async def load_state(db: AsyncSession, session_pk: str) -> dict[str, list[dict[str, Any]]]:
    """The stored state_dict of a session (entries oldest first), a fork's shared prefix
    included."""
    rows = await db.execute(
        sa.select(Message.key, Message.index, Message.data)
        .where(Message.session_pk == session_pk)
        .order_by(Message.key, Message.index)
    )
    state: dict[str, list[dict[str, Any]]] = {}
    fork: dict[str, Any] | None = None
    whole: set[str] = set()  # keys whose own rows start at 0 (rewritten: no shared prefix)
    for key, index, data in rows:
        if key == FORK_KEY:
            fork = data
            continue
        if key not in state and index == 0:
            whole.add(key)
        state.setdefault(key, []).append(data)
    if fork is not None:
        parent = await load_state(db, str(fork["parent_pk"]))
        for key, count in dict(fork.get("counts") or {}).items():
            if key not in whole and count:
                state[key] = parent.get(key, [])[: int(count)] + state.get(key, [])
    return state


def new_rows(
    session_pk: str,
    run_id: str | None,
    before: dict[str, int],
    after: dict[str, Any],
) -> tuple[list[dict[str, Any]], list[str]]:
    """Rows to append (entries past the stored length ``before[key]``) and keys whose history
    shrank; only the new entries are dumped."""
    rows: list[dict[str, Any]] = []
    rewrite: list[str] = []
    now = utcnow()
    for key, items in after.items():
        items = items or []
        start = before.get(key, 0)
        if len(items) < start:  # memory was cut: rewrite that key (rare)
            rewrite.append(key)
            start = 0
        for index in range(start, len(items)):
            item = items[index]
            if isinstance(item, AgentMessage):
                data = dump_message(item)
            elif isinstance(item, dict):
                data = dump_message(load_message(item))
            else:
                data = jsonable(item)
            rows.append(
                {
                    "session_pk": session_pk,
                    "key": key,
                    "index": index,
                    "data": data,
                    "run_id": run_id,
                    "created_at": now,
                }
            )
    return rows, rewrite


def memory_rev_bump(session_pk: str) -> sa.Update:
    """The statement marking the session's memory changed: cached copies go stale."""
    return (
        sa.update(SESSIONS)
        .where(SESSIONS.c.pk == session_pk)
        .values(memory_rev=SESSIONS.c.memory_rev + 1)
    )


async def bump_memory_rev(db: AsyncSession, session_pk: str) -> None:
    """Mark the session's memory changed in the caller's transaction."""
    await db.execute(memory_rev_bump(session_pk))
