"""Every stored agent is an A2A server: the official a2a-sdk client, unchanged, against a live
server (card, send, stream, get, cancel, resubscribe; tenancy)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import httpx
import pytest
from a2a.client import A2ACardResolver, ClientConfig, ClientFactory
from a2a.client.errors import AgentCardResolutionError
from a2a.types import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    SubscribeToTaskRequest,
    TaskState,
)

from app.settings import Settings
from tests.app.conftest import KEY_A, KEY_B, make_agent
from tests.app.live import live_server

pytestmark = pytest.mark.live
_ids = itertools.count()


@pytest.fixture
def base_url(settings_factory: Callable[..., Settings]) -> Iterator[str]:
    with live_server(settings_factory()) as url:
        yield url


@pytest.fixture
async def http(base_url: str) -> AsyncIterator[httpx.AsyncClient]:
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as c:
        yield c


def user_message(text: str, context_id: str = "") -> Message:
    """A user's A2A message (a new context unless ``context_id``)."""
    return Message(
        message_id=f"m-{next(_ids)}",
        context_id=context_id,
        role=Role.ROLE_USER,
        parts=[Part(text=text)],
    )


async def a2a_client(http: httpx.AsyncClient, base_url: str, agent: str, streaming: bool) -> Any:
    """The SDK's own way in: resolve the card, then a client for it."""
    resolver = A2ACardResolver(http, base_url=f"{base_url}/a2a/{agent}")
    card = await resolver.get_agent_card()
    factory = ClientFactory(ClientConfig(streaming=streaming, httpx_client=http))
    return card, factory.create(card)


async def test_card_send_and_get(http: httpx.AsyncClient, base_url: str) -> None:
    await make_agent(http, "poet", model="poet")
    card, client = await a2a_client(http, base_url, "poet", streaming=False)
    assert card.name == "poet"
    assert card.capabilities.streaming is True
    assert "bearer" in card.security_schemes
    assert card.supported_interfaces[0].url == f"{base_url}/a2a/poet/"

    request = SendMessageRequest(message=user_message("Hi"))
    task = [r async for r in client.send_message(request)][-1].task
    assert task.status.state == TaskState.TASK_STATE_COMPLETED
    assert task.artifacts[0].parts[0].text == "Roses are red."
    # The context is a session of the service, the task one of its runs.
    run = (await http.get(f"/v1/runs/{task.id}")).json()
    assert run["session_id"] == task.context_id and run["status"] == "completed"

    request = SendMessageRequest(message=user_message("More", context_id=task.context_id))
    again = [r async for r in client.send_message(request)][-1].task
    assert again.context_id == task.context_id
    assert again.artifacts[0].parts[0].text == "Violets are blue."
    memory = (await http.get(f"/v1/sessions/{task.context_id}/memory")).json()["memory"]
    assert [m["content"] for m in memory] == ["Hi", "Roses are red.", "More", "Violets are blue."]

    got = await client.get_task(GetTaskRequest(id=task.id))
    assert got.status.state == TaskState.TASK_STATE_COMPLETED


async def test_stream_status_updates_then_artifact(http: httpx.AsyncClient, base_url: str) -> None:
    await make_agent(http, "slowpoke", model="slow")
    _, client = await a2a_client(http, base_url, "slowpoke", streaming=True)
    kinds: list[str] = []
    text, final, task_id = "", "", ""
    async for response in client.send_message(SendMessageRequest(message=user_message("Go"))):
        kind = response.WhichOneof("payload")
        kinds.append(kind)
        if kind == "task":
            task_id = response.task.id
        elif kind == "status_update" and response.status_update.status.message.parts:
            text += response.status_update.status.message.parts[0].text
        elif kind == "artifact_update":
            final = response.artifact_update.artifact.parts[0].text
    assert kinds[0] == "task" and task_id
    assert kinds.count("status_update") > 2  # tokens arrive as working updates
    assert kinds[-2:] == ["artifact_update", "status_update"]
    assert text == final == "one two three four five six seven eight nine ten"

    # Resubscribing to the finished task replays it to its end.
    replay = [r async for r in client.subscribe(SubscribeToTaskRequest(id=task_id))]
    assert replay[-1].status_update.status.state == TaskState.TASK_STATE_COMPLETED


async def test_cancel_a_streaming_task(http: httpx.AsyncClient, base_url: str) -> None:
    await make_agent(http, "slowpoke", model="slow")
    _, client = await a2a_client(http, base_url, "slowpoke", streaming=True)
    stream = client.send_message(SendMessageRequest(message=user_message("Go")))
    task_id = (await anext(stream)).task.id
    await anext(stream)  # a token: the run is under way
    cancelled = await client.cancel_task(CancelTaskRequest(id=task_id))
    assert cancelled.status.state == TaskState.TASK_STATE_CANCELED
    rest = [r async for r in stream]
    assert rest[-1].status_update.status.state == TaskState.TASK_STATE_CANCELED
    run = (await http.get(f"/v1/runs/{task_id}")).json()
    assert run["status"] == "cancelled"


async def test_other_tenants_agent_is_not_found(http: httpx.AsyncClient, base_url: str) -> None:
    await make_agent(http, "poet", model="poet")
    headers = {"Authorization": f"Bearer {KEY_B}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=10) as other:
        resolver = A2ACardResolver(other, base_url=f"{base_url}/a2a/poet")
        with pytest.raises(AgentCardResolutionError):
            await resolver.get_agent_card()
        resp = await other.get("/a2a/poet/.well-known/agent-card.json")
        assert resp.status_code == 404 and resp.json()["error"]["code"] == "not_found"
    async with httpx.AsyncClient(base_url=base_url, timeout=10) as anonymous:
        resp = await anonymous.get("/a2a/poet/.well-known/agent-card.json")
        assert resp.status_code == 401
