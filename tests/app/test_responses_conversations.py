"""Conversations through the official ``openai`` client (SQLite and PostgreSQL): a conversation
is a session; responses in it share its memory; items; tenants; store: false."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import openai
import pytest
from fastapi import FastAPI

from tests.app.conftest import KEY_B, make_agent
from tests.app.test_responses import client_for, valid


@pytest.fixture
async def oai(app: FastAPI) -> AsyncIterator[openai.AsyncOpenAI]:
    client = client_for(app)
    yield client
    await client.close()


async def test_conversation_holds_the_turns_of_its_responses(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    conversation = await oai.conversations.create(
        items=[{"type": "message", "role": "user", "content": "My name is Ada."}],
        metadata={"topic": "names"},
    )
    assert conversation.id.startswith("conv_") and conversation.metadata == {"topic": "names"}
    first = await oai.responses.create(model="echo", input="hello", conversation=conversation.id)
    assert first.conversation is not None and first.conversation.id == conversation.id
    raw = await client.post(
        "/v1/responses",
        json={"model": "echo", "input": "again", "conversation": {"id": conversation.id}},
    )
    assert raw.headers["X-Session-Id"] == conversation.id
    valid(raw.json())
    items = await oai.conversations.items.list(conversation.id, order="asc")
    texts = [(i.type, i.role, i.content[0].text) for i in items.data]  # type: ignore[union-attr]
    assert texts == [
        ("message", "user", "My name is Ada."),
        ("message", "user", "hello"),
        ("message", "assistant", "hello"),
        ("message", "user", "again"),
        ("message", "assistant", "again"),
    ]
    newest = await oai.conversations.items.list(conversation.id, limit=1)
    assert newest.data[0].content[0].text == "again" and newest.has_more  # type: ignore[union-attr]
    added = await oai.conversations.items.create(
        conversation.id, items=[{"type": "message", "role": "user", "content": "More."}]
    )
    assert added.data[0].content[0].text == "More."  # type: ignore[union-attr]
    items = await oai.conversations.items.list(conversation.id, order="asc")
    assert len(items.data) == 6
    updated = await oai.conversations.update(conversation.id, metadata={"topic": "other"})
    assert updated.metadata == {"topic": "other"}
    assert (await oai.conversations.retrieve(conversation.id)).metadata == {"topic": "other"}


async def test_store_false_in_a_conversation_leaves_it_unchanged(
    oai: openai.AsyncOpenAI,
) -> None:
    conversation = await oai.conversations.create()
    await oai.responses.create(model="echo", input="kept", conversation=conversation.id)
    gone = await oai.responses.create(
        model="echo", input="not kept", conversation=conversation.id, store=False
    )
    assert gone.output_text == "not kept"
    items = await oai.conversations.items.list(conversation.id)
    assert len(items.data) == 2
    with pytest.raises(openai.NotFoundError):
        await oai.responses.retrieve(gone.id)


async def test_a_conversation_with_a_stored_agent(
    oai: openai.AsyncOpenAI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", "poet")
    conversation = await oai.conversations.create()
    answer = await oai.responses.create(model="helper", input="hi", conversation=conversation.id)
    assert answer.output_text == "Roses are red."
    session = (await client.get(f"/v1/sessions/{conversation.id}")).json()
    assert session["agent"] == "helper"
    with pytest.raises(openai.BadRequestError) as other:
        await oai.responses.create(model="echo", input="hi", conversation=conversation.id)
    assert other.value.body["param"] == "model"  # type: ignore[index]


async def test_conversation_errors_and_tenants(oai: openai.AsyncOpenAI, app: FastAPI) -> None:
    conversation = await oai.conversations.create()
    other = client_for(app, KEY_B)
    with pytest.raises(openai.NotFoundError):
        await other.conversations.retrieve(conversation.id)
    with pytest.raises(openai.NotFoundError) as unknown:
        await other.responses.create(model="echo", input="x", conversation=conversation.id)
    assert unknown.value.code == "conversation_not_found"
    await other.close()
    with pytest.raises(openai.BadRequestError):
        await oai.responses.create(
            model="echo", input="x", conversation=conversation.id, previous_response_id="resp_x"
        )
    deleted = await oai.conversations.delete(conversation.id)
    assert deleted.deleted and deleted.id == conversation.id
    with pytest.raises(openai.NotFoundError):
        await oai.conversations.retrieve(conversation.id)
