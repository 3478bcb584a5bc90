"""Forking a session at one of its runs: a new session whose memory is the first one's as it
was when that run ended, shared, not copied.

The new session holds one marker row (``rows.FORK_KEY``: the parent session and how many
entries of each memory key it starts with); ``rows.load_state`` reads the parent's prefix
(recursively, a fork of a fork) before the fork's own rows, whose indexes go on after it.
Replacing or resetting the fork's memory deletes the marker with its rows. Deleting the
parent session deletes its rows, and with them the fork's prefix.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from app.db.base import new_id, utcnow
from app.db.models import Agent, Message, Run
from app.db.models import Session as SessionRow
from app.runtime.store.rows import FORK_KEY


async def counts_at(db: AsyncSession, session_pk: str, run: Run) -> dict[str, int]:
    """How many entries each memory key of the session held when ``run`` ended: its own rows
    stored before any later run's (and a fork's shared prefix)."""
    later = sa.select(Run.id).where(Run.session_pk == session_pk, Run.created_at > run.created_at)
    cutoff = await db.scalar(
        sa.select(sa.func.min(Message.id)).where(
            Message.session_pk == session_pk, Message.run_id.in_(later)
        )
    )
    rows = await db.execute(
        sa.select(Message.key, Message.index, Message.data)
        .where(Message.session_pk == session_pk)
        .where(Message.id < cutoff if cutoff is not None else sa.true())
    )
    counts: dict[str, int] = {}
    marker: dict[str, Any] | None = None
    for key, index, data in rows:
        if key == FORK_KEY:
            marker = data
            continue
        counts[key] = max(counts.get(key, 0), int(index) + 1)
    for key, count in dict((marker or {}).get("counts") or {}).items():
        counts.setdefault(key, int(count))  # a fork's key with no rows of its own yet
    return counts


async def fork_session(
    db: AsyncSession,
    parent: SessionRow,
    counts: dict[str, int],
    agent: Agent,
    session_id: str,
    metadata: dict[str, Any] | None = None,
) -> SessionRow:
    """A new session of ``agent`` starting with the first ``counts[key]`` entries of
    ``parent``'s memory (in the caller's transaction)."""
    now = utcnow()
    row = SessionRow(
        pk=new_id("sesspk"),
        tenant_id=parent.tenant_id,
        id=session_id,
        agent_id=agent.id,
        agent_version=agent.version,
        metadata_=metadata or {},
        created_at=now,
        updated_at=now,
        memory_rev=1,  # revision 0 means "nothing stored": this memory must be read
    )
    db.add(row)
    await db.flush()  # the session before its marker row (no ORM relationship orders them)
    db.add(
        Message(
            session_pk=row.pk,
            key=FORK_KEY,
            index=0,
            data={"parent_pk": parent.pk, "counts": counts},
            created_at=now,
        )
    )
    await db.flush()
    return row
