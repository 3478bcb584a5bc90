"""``/v1/conversations``: a conversation is a session (its id ``conv_<K><R>`` is the session's).

A new conversation's session belongs to the agent of the tenant's first raw model it may use
(``responses.<model>``); the first response in it moves it to the response's model or agent
(a raw model's agent to another's at any time; to a stored agent while it has no run). Its
items are the session's memory (``memory``): added items are appended to it, and the items of
every response in it follow in order.
"""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.ext.asyncio import AsyncSession

from agents.chat_agent import CHAT_KEY, chat_message
from agents.schema import AgentMessage
from app.cache import TURN_SESSIONS, invalidate_on_commit
from app.db.models import Agent, Message
from app.db.models import Session as SessionRow
from app.errors import BadRequest, NotFound
from app.runtime.messages import dump_message
from app.runtime.store.rows import load_state, memory_rev_bump
from app.schemas.sessions import SessionCreate
from app.schemas.vocab import CancelMode
from app.services import responses_ids as ids
from app.services.auth import Principal
from app.services.responses_input import Input, parse_input
from app.services.responses_plan import agent_for
from app.services.responses_read import item_page
from app.services.sessions import active_run, create_session
from app.state import AppState

MEMORY = "memory"


def conversation_public(row: SessionRow) -> dict[str, Any]:
    """The Conversation object."""
    return {
        "id": row.id,
        "object": "conversation",
        "created_at": int(row.created_at.timestamp()),
        "metadata": row.metadata_ or {},
    }


async def get_conversation(db: AsyncSession, tenant_id: str, conversation_id: str) -> SessionRow:
    """The tenant's conversation (404 otherwise)."""
    row = None
    if conversation_id.startswith(ids.CONVERSATION):
        row = await db.scalar(
            sa.select(SessionRow).where(
                SessionRow.tenant_id == tenant_id, SessionRow.id == conversation_id
            )
        )
    if row is None:
        raise NotFound(
            f"Conversation with id '{conversation_id}' not found.",
            param="conversation_id",
            code="conversation_not_found",
        )
    return row


async def create_conversation(
    state: AppState,
    who: Principal,
    items: list[dict[str, Any]] | None,
    metadata: dict[str, str] | None,
    header: str | None,
) -> dict[str, Any]:
    """A new conversation (its first items stored as its memory); the Conversation object.

    Its session is made as every session is (``sessions.create_session``: kernels started
    ahead, the first turn's lookup kept), its first items inserted in the same statement, so
    a failure leaves neither."""
    inp = parse_input(items or [], "items")  # 400 naming the item before anything is stored
    models = who.visible(state.models.names())
    if not models:
        raise BadRequest("no model of this server may hold a conversation for this key")
    agent = await agent_for(state, who, models[0])
    conversation_id = ids.mint(ids.CONVERSATION, ids.route_key(header))
    memory: list[dict[str, Any]] = []
    if inp.messages:
        entry = _entry(inp, agent.spec.kind == "model")
        memory.append({"key": MEMORY, "index": 0, "data": entry})
    body = SessionCreate(agent=agent.name, id=conversation_id, metadata=metadata or {})
    new, _ = await create_session(state, who.tenant_id, body, memory)
    return {
        "id": new.id,
        "object": "conversation",
        "created_at": int(new.at.timestamp()),
        "metadata": new.metadata,
    }


async def add_items(
    state: AppState, who: Principal, conversation_id: str, items: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Append items to a conversation (409 ``session_busy`` while a response runs in it);
    returns them as listed."""
    inp = parse_input(items, "items")
    async with state.sessionmaker() as db:
        row = await get_conversation(db, who.tenant_id, conversation_id)
        agent = await db.get(Agent, row.agent_id)
    chat = agent is not None and (agent.spec or {}).get("kind") == "model"
    async with state.run_manager.writing_memory(row.pk, row.id) as db:
        count = len((await load_state(db, row.pk)).get(MEMORY, []))
        await _append(db, row, inp, chat, count)
        invalidate_on_commit(db, TURN_SESSIONS, (who.tenant_id, row.id))
    entry = _entry(inp, chat)
    return _items(row.id, count, entry)


def _entry(inp: Input, chat: bool) -> dict[str, Any]:
    """The items as one memory entry: chat messages for a raw model's agent, else their text
    (a user message, as an agent reads it)."""
    if chat:
        return dump_message(chat_message("user", inp.text(), inp.messages))
    return dump_message(AgentMessage(sender="user", content=inp.text()))


async def _append(db: AsyncSession, row: SessionRow, inp: Input, chat: bool, at: int) -> None:
    """Store the items as one memory entry at index ``at``."""
    data = _entry(inp, chat)
    db.add(Message(session_pk=row.pk, key=MEMORY, index=at, data=data))
    await db.flush()
    await db.execute(memory_rev_bump(row.pk))


async def list_items(
    state: AppState, who: Principal, conversation_id: str, order: str, after: str | None, limit: int
) -> dict[str, Any]:
    """A page of a conversation's items (its memory, as items)."""
    if order not in ("asc", "desc"):
        raise BadRequest("order must be asc or desc", param="order")
    async with state.sessionmaker() as db:
        row = await get_conversation(db, who.tenant_id, conversation_id)
        memory = (await load_state(db, row.pk)).get(MEMORY, [])
    items: list[dict[str, Any]] = []
    for index, entry in enumerate(memory):
        items += _items(row.id, index, entry)
    return item_page(items, order, after, limit)


def _items(conversation_id: str, index: int, entry: dict[str, Any]) -> list[dict[str, Any]]:
    """One memory entry as conversation items (ids stable: the entry's index and position)."""
    suffix = conversation_id.removeprefix(ids.CONVERSATION)
    formatted = entry.get("formatted")
    if isinstance(formatted, dict) and isinstance(formatted.get(CHAT_KEY), list):
        messages = formatted[CHAT_KEY]
    else:
        role = "user" if entry.get("sender") == "user" else "assistant"
        content = entry.get("content")
        messages = [
            {"role": role, "content": content if isinstance(content, str) else str(content)}
        ]
    out: list[dict[str, Any]] = []
    for n, message in enumerate(messages):
        base = f"{suffix}_{index}_{n}"
        role = message.get("role")
        if role == "tool":
            out.append(
                {
                    "id": f"fco_{base}",
                    "type": "function_call_output",
                    "call_id": message.get("tool_call_id"),
                    "output": str(message.get("content") or ""),
                    "status": "completed",
                }
            )
            continue
        text = message.get("content")
        if text:
            assistant = role == "assistant"
            part: dict[str, Any] = {
                "type": "output_text" if assistant else "input_text",
                "text": text,
            }
            if assistant:
                part["annotations"] = []
            out.append(
                {
                    "id": f"msg_{base}",
                    "type": "message",
                    "role": role if role in ("user", "system", "assistant") else "user",
                    "status": "completed",
                    "content": [part],
                }
            )
        for k, call in enumerate(message.get("tool_calls") or []):
            fn = call.get("function") or {}
            out.append(
                {
                    "id": f"fc_{base}_{k}",
                    "type": "function_call",
                    "call_id": call.get("id"),
                    "name": fn.get("name"),
                    "arguments": fn.get("arguments") or "",
                    "status": "completed",
                }
            )
    return out


async def update_metadata(
    state: AppState, who: Principal, conversation_id: str, metadata: dict[str, str]
) -> SessionRow:
    """Replace a conversation's metadata."""
    async with state.sessionmaker() as db, db.begin():
        row = await get_conversation(db, who.tenant_id, conversation_id)
        row.metadata_ = metadata
    return row


async def delete_conversation(state: AppState, who: Principal, conversation_id: str) -> None:
    """Delete a conversation: its session, memory and responses (a running one is cancelled)."""
    async with state.sessionmaker() as db, db.begin():
        row = await get_conversation(db, who.tenant_id, conversation_id)
        active = await active_run(db, row.pk)
    if active is not None:
        await state.run_manager.cancel(active, CancelMode.CANCELLED)
    async with state.sessionmaker() as db, db.begin():
        await db.execute(sa.delete(SessionRow).where(SessionRow.pk == row.pk))
        invalidate_on_commit(db, TURN_SESSIONS, (who.tenant_id, conversation_id))
