"""The OpenAI Conversations API: ``/v1/conversations`` (a conversation is a session;
docs/responses.md). Answers carry ``X-Session-Id``: the conversation's session."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Header, Query
from starlette.responses import Response

from app.api.responses import SESSION_HEADER
from app.deps import PrincipalDep, StateDep
from app.models.encoded import dumps
from app.schemas.responses import ConversationCreate, ConversationUpdate, ItemsCreate
from app.services import conversations as service
from app.services.responses_ids import ROUTE_KEY_HEADER

router = APIRouter(prefix="/v1/conversations", tags=["responses"])


def _json(body: dict[str, Any], conversation_id: str) -> Response:
    return Response(
        dumps(body), media_type="application/json", headers={SESSION_HEADER: conversation_id}
    )


@router.post("", response_model=None)
async def create_conversation(
    body: ConversationCreate,
    state: StateDep,
    who: PrincipalDep,
    x_route_key: Annotated[str | None, Header(alias=ROUTE_KEY_HEADER, max_length=128)] = None,
) -> Response:
    """A new conversation, with its first items."""
    items = body.item_dicts()
    conversation = await service.create_conversation(state, who, items, body.metadata, x_route_key)
    return _json(conversation, conversation["id"])


@router.get("/{conversation_id}", response_model=None)
async def get_conversation(conversation_id: str, state: StateDep, who: PrincipalDep) -> Response:
    """A conversation."""
    async with state.sessionmaker() as db:
        row = await service.get_conversation(db, who.tenant_id, conversation_id)
    return _json(service.conversation_public(row), row.id)


@router.post("/{conversation_id}", response_model=None)
async def update_conversation(
    conversation_id: str, body: ConversationUpdate, state: StateDep, who: PrincipalDep
) -> Response:
    """Replace a conversation's metadata."""
    row = await service.update_metadata(state, who, conversation_id, body.metadata)
    return _json(service.conversation_public(row), row.id)


@router.delete("/{conversation_id}", response_model=None)
async def delete_conversation(conversation_id: str, state: StateDep, who: PrincipalDep) -> Response:
    """Delete a conversation (its session: memory and responses)."""
    await service.delete_conversation(state, who, conversation_id)
    body = {"id": conversation_id, "object": "conversation.deleted", "deleted": True}
    return _json(body, conversation_id)


@router.get("/{conversation_id}/items", response_model=None)
async def list_items(
    conversation_id: str,
    state: StateDep,
    who: PrincipalDep,
    order: Literal["asc", "desc"] = "desc",
    after: str | None = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 20,
) -> Response:
    """A page of the conversation's items (newest first unless ``order=asc``)."""
    page = await service.list_items(state, who, conversation_id, order, after, limit)
    return _json(page, conversation_id)


@router.post("/{conversation_id}/items", response_model=None)
async def add_items(
    conversation_id: str, body: ItemsCreate, state: StateDep, who: PrincipalDep
) -> Response:
    """Append items (409 ``session_busy`` while a response runs in the conversation)."""
    items = await service.add_items(state, who, conversation_id, body.item_dicts())
    page = {
        "object": "list",
        "data": items,
        "first_id": items[0]["id"] if items else None,
        "last_id": items[-1]["id"] if items else None,
        "has_more": False,
    }
    return _json(page, conversation_id)
