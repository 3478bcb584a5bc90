"""One turn of an agent: build it, load its memory, stream it, and persist only what is new."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents.llms.base import Usage, usage_scope
from agents.memory import load_message
from agents.schema import AgentMessage, AgentStatusCode
from app.db.base import utcnow
from app.db.models import Message
from app.db.models import Session as SessionRow
from app.runtime.approvals import Resumption
from app.runtime.events import RunChannel
from app.runtime.messages import dump_message, jsonable
from app.runtime.registry import ServableAgent
from app.schemas.vocab import EventType

SESSIONS = cast(sa.Table, SessionRow.__table__)  # Core statements: no ORM bookkeeping
MESSAGES = cast(sa.Table, Message.__table__)

# Chunks in these states are a message still being written; any other state completes one.
GENERATING = frozenset({AgentStatusCode.STREAM_ING})


async def load_state(db: AsyncSession, session_pk: str) -> dict[str, list[dict[str, Any]]]:
    """The stored state_dict of a session (entries oldest first)."""
    rows = await db.execute(
        sa.select(Message.key, Message.data)
        .where(Message.session_pk == session_pk)
        .order_by(Message.key, Message.index)
    )
    state: dict[str, list[dict[str, Any]]] = {}
    for key, data in rows:
        state.setdefault(key, []).append(data)
    return state


def merge_state(
    empty: dict[str, Any], stored: dict[str, list[dict[str, Any]]]
) -> dict[str, list[Any]]:
    """The agent's keys, filled from storage (keys with no rows stay empty; others are dropped)."""
    return {key: stored.get(key, []) for key in empty}


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


async def save_new_messages(
    db: AsyncSession,
    session_pk: str,
    run_id: str | None,
    before: dict[str, int],
    after: dict[str, Any],
    bump: bool = True,
) -> bool:
    """Append the new entries of ``after`` in the caller's transaction (one executemany, and a
    ``memory_rev`` bump unless the caller makes it); returns whether anything changed."""
    rows, rewrite = new_rows(session_pk, run_id, before, after)
    if rewrite:
        await db.execute(
            sa.delete(Message).where(Message.session_pk == session_pk, Message.key.in_(rewrite))
        )
    if rows:
        await db.execute(sa.insert(MESSAGES), rows)
    if bump and (rows or rewrite):
        await bump_memory_rev(db, session_pk)
    return bool(rows or rewrite)


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


@dataclass
class TurnResult:
    """What a turn produced."""

    final: AgentMessage | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)


class _Segmenter:
    """Turns an agent's chunk stream into message.delta and message events."""

    def __init__(self, channel: RunChannel | None, result: TurnResult, index: int = 0) -> None:
        self.channel = channel
        self.result = result
        self.index = index - 1
        self.open: AgentMessage | None = None
        self.text: Any = None

    async def feed(self, chunk: AgentMessage) -> None:
        state = AgentStatusCode(int(chunk.stream_state))
        continues = self.open is not None and self.open.sender == chunk.sender
        if not continues:
            await self.close()
            self.index += 1
            self.text = None
        delta = self._delta(chunk.content)
        self.open, self.text = chunk, chunk.content
        if self.channel is not None and delta not in (None, ""):
            await self.channel.delta(self.index, chunk.sender, delta, int(state))
        if state not in GENERATING:
            await self.close()

    def _delta(self, content: Any) -> Any:
        if (
            isinstance(content, str)
            and isinstance(self.text, str)
            and content.startswith(self.text)
        ):
            return content[len(self.text) :]
        if content == self.text:
            return None
        return jsonable(content)

    async def close(self) -> None:
        if self.open is None:
            return
        data = dump_message(self.open)
        self.result.messages.append(data)
        if self.channel is not None:
            # Stored by the channel's next flush (≤ flush_s) or with the run's final status:
            # the message rows themselves are only written when the run ends.
            await self.channel.emit(EventType.MESSAGE, {"index": self.index, "message": data})
        self.open = None
        self.text = None


def turn_params(agent: ServableAgent, gen_params: dict[str, Any]) -> dict[str, Any]:
    """A turn's LLM parameters: the spec's (set by the builder), overridden by the run's."""
    return {**getattr(agent, "agentstation_gen_params", {}), **gen_params}


async def stream_turn(
    agent: ServableAgent,
    message: AgentMessage,
    session_key: str,
    gen_params: dict[str, Any],
    channel: RunChannel | None = None,
    result: TurnResult | None = None,
) -> AsyncIterator[AgentMessage]:
    """Run one turn, yielding chunks; ``channel`` (if any) receives the events."""
    result = result if result is not None else TurnResult()
    segmenter = _Segmenter(channel, result)
    params = turn_params(agent, gen_params)
    async for chunk in agent.stream(message, session_id=session_key, **params):
        await segmenter.feed(chunk)
        yield chunk
    await segmenter.close()


async def resume_turn(
    agent: ServableAgent,
    resume: Resumption,
    session_key: str,
    gen_params: dict[str, Any],
    channel: RunChannel | None = None,
    result: TurnResult | None = None,
) -> TurnResult:
    """Go on with a turn that stopped before tool calls: the decided calls' results, then the
    agent's next model turns (``agent.resume_stream``), as ``run_turn`` streams a turn."""
    result = result if result is not None else TurnResult()
    segmenter = _Segmenter(channel, result, resume.message_index)
    params = turn_params(agent, gen_params)
    with usage_scope() as usage:
        result.usage = usage
        stream = agent.resume_stream(  # type: ignore[attr-defined]
            resume.decisions, session_id=session_key, pending=resume.pending, **params
        )
        async for chunk in stream:
            await segmenter.feed(chunk)
            if AgentStatusCode(int(chunk.stream_state)) == AgentStatusCode.END:
                result.final = chunk
        await segmenter.close()
    return result


async def run_turn(
    agent: ServableAgent,
    message: AgentMessage,
    session_key: str,
    gen_params: dict[str, Any],
    channel: RunChannel | None = None,
    result: TurnResult | None = None,
) -> TurnResult:
    """Run one turn to its END message; ``result`` fills in as it goes (usage included)."""
    result = result if result is not None else TurnResult()
    with usage_scope() as usage:
        result.usage = usage  # the live counter: a cancelled turn still reports its usage
        async for chunk in stream_turn(agent, message, session_key, gen_params, channel, result):
            if AgentStatusCode(int(chunk.stream_state)) == AgentStatusCode.END:
                result.final = chunk
    return result
