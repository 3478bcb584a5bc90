"""Every stored agent is an A2A server: the official a2a-sdk client, unchanged, against a live
server (card, send, stream, get, cancel, resubscribe; tenancy)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
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

from app.db.migrate import upgrade
from app.schemas.agents import AgentSpec
from app.settings import Settings
from tests.app.conftest import KEY_A, KEY_B, make_agent, make_settings, parse_sse
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
    # An ended task cannot be cancelled (again): TaskNotCancelableError, as the SDK's handlers.
    with pytest.raises(Exception, match="has already ended"):
        await client.cancel_task(CancelTaskRequest(id=task_id))
    raw = await http.post(
        f"{base_url}/a2a/slowpoke/",
        json={"jsonrpc": "2.0", "id": 1, "method": "CancelTask", "params": {"id": task_id}},
        headers={"A2A-Version": "1.0"},
    )
    assert raw.json()["error"]["code"] == -32002, raw.text


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


async def test_remote_agent_streams_and_keeps_its_context(
    http: httpx.AsyncClient, base_url: str
) -> None:
    from agents.remote import RemoteAgent
    from agents.schema import AgentStatusCode

    await make_agent(http, "slowpoke", model="slow")
    remote = RemoteAgent(f"{base_url}/a2a/slowpoke/", name="expert", api_key=KEY_A)
    chunks = [c async for c in remote.stream("Go", session_id="s1")]
    streamed = [c for c in chunks if c.stream_state == AgentStatusCode.STREAM_ING]
    assert len(streamed) > 2
    assert chunks[-1].content == "one two three four five six seven eight nine ten"
    assert chunks[-1].sender == "expert"
    context = chunks[-1].extra_info["a2a_context_id"]
    # The next turn of the same session continues the same remote session; state_dict has it.
    await remote("Again", session_id="s1")
    memory = (await http.get(f"/v1/sessions/{context}/memory")).json()["memory"]
    assert [m["content"] for m in memory][::2] == ["Go", "Again"]
    restored = RemoteAgent(f"{base_url}/a2a/slowpoke/", api_key=KEY_A)
    restored.load_state_dict(remote.state_dict("s1"), "s1")
    assert restored._context_id("s1") == context


async def test_remote_url_is_checked_against_the_allowlist(http: httpx.AsyncClient) -> None:
    spec = {"remote": "http://127.0.0.1:9/a2a/x/"}
    resp = await http.post("/v1/agents", json={"name": "far", "spec": spec})
    assert resp.status_code == 422, resp.text
    error = resp.json()["error"]
    assert error["code"] == "url_not_allowed" and error["param"] == "spec.remote"
    spec = {"remote": "http://169.254.169.254/latest/"}  # cloud metadata
    resp = await http.post("/v1/agents", json={"name": "far", "spec": spec})
    assert resp.json()["error"]["code"] == "url_not_allowed"
    sub = {"kind": "agent", "model": "echo", "sub_agents": {"x": {"remote": "http://10.1.2.3/"}}}
    resp = await http.post("/v1/agents", json={"name": "far", "spec": sub})
    assert resp.json()["error"]["param"] == "spec.sub_agents.x.remote"
    # A key variable must be one meant for remote agents (not, say, the database URL).
    spec = {
        "remote": "https://agents.example.com/a2a/x/",
        "api_key_env": "AGENTSTATION_DATABASE_URL",
    }
    resp = await http.post("/v1/agents", json={"name": "far", "spec": spec})
    assert resp.status_code == 422 and resp.json()["error"]["param"] == "spec.api_key_env"


async def test_alice_on_one_server_streams_bob_on_another(
    base_url: str,
    http: httpx.AsyncClient,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    """Byzer's example across two live servers: Alice's run streams Bob's tokens; cancelling
    Alice's run cancels Bob's."""
    await make_agent(http, "bob", model="slow")  # server B (the fixture's server)
    monkeypatch.setenv("AGENTSTATION_REMOTE_KEY_BOB", KEY_A)
    other_db = f"sqlite+aiosqlite:///{tmp_path / 'alice.db'}"  # server A: its own database
    await asyncio.to_thread(upgrade, other_db)
    settings_a = make_settings(other_db, outbound_allow="127.0.0.1")
    with live_server(settings_a) as server_a:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(base_url=server_a, headers=headers, timeout=30) as a:
            spec = {"remote": f"{base_url}/a2a/bob/", "api_key_env": "AGENTSTATION_REMOTE_KEY_BOB"}
            resp = await a.post("/v1/agents", json={"name": "alice", "spec": spec})
            assert resp.status_code == 201, resp.text
            sid = (await a.post("/v1/sessions", json={"agent": "alice"})).json()["id"]
            body = {"message": "Hi Bob", "stream": True}
            async with a.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
                text = await resp.aread()
            frames = [f for f in parse_sse(text.decode()) if "event" in f]
            deltas = [f for f in frames if f["event"] == "message.delta"]
            assert len(deltas) > 2  # Bob's tokens, live through Alice's run
            assert frames[-1]["event"] == "run.completed"
            final = frames[-1]["data"]["run"]["output"]["content"]
            assert final == "one two three four five six seven eight nine ten"

            # Cancel Alice's next run while Bob is speaking: Bob's run ends cancelled too.
            body = {"message": "Again", "stream": True}
            async with a.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
                lines = resp.aiter_lines()
                run_id = ""
                async for line in lines:
                    if line.startswith("data:") and not run_id:
                        run_id = json.loads(line[5:])["run"]["id"]
                    if line == "event: message.delta":
                        break
                await a.post(f"/v1/runs/{run_id}/cancel")
            assert (await a.get(f"/v1/runs/{run_id}")).json()["status"] == "cancelled"
            # As a sub-agent: Alice (echo) hands her answer to Bob on B in a review round;
            # Bob's tokens stream through Alice's run under his name.
            bob = {"remote": f"{base_url}/a2a/bob/", "api_key_env": "AGENTSTATION_REMOTE_KEY_BOB"}
            spec = {"kind": "agent", "model": "echo", "sub_agents": {"bob": bob}}
            resp = await a.post("/v1/agents", json={"name": "alice2", "spec": spec})
            assert resp.status_code == 201, resp.text
            sid = (await a.post("/v1/sessions", json={"agent": "alice2"})).json()["id"]
            body = {"message": "Hi Bob", "stream": True}
            async with a.stream("POST", f"/v1/sessions/{sid}/messages", json=body) as resp:
                text = await resp.aread()
            frames = [f for f in parse_sse(text.decode()) if "event" in f]
            from_bob = [
                f for f in frames if f["event"] == "message.delta" and f["data"]["sender"] == "bob"
            ]
            assert len(from_bob) > 2, frames  # streamed, token by token, through A
            assert frames[-1]["event"] == "run.completed", frames[-1]
            said = [f["data"]["message"]["content"] for f in frames if f["event"] == "message"]
            assert "one two three four five six seven eight nine ten" in said
    bob_runs: list[dict[str, Any]] = []
    for _ in range(50):
        sessions = (await http.get("/v1/sessions", params={"agent": "bob"})).json()["data"]
        bob_runs = (await http.get(f"/v1/sessions/{sessions[-1]['id']}/runs")).json()["data"]
        if bob_runs[0]["status"] != "running":
            break
        await asyncio.sleep(0.1)
    assert [r["status"] for r in bob_runs] == ["cancelled", "completed"]  # Alice's session on B


def test_a_remote_agent_needs_none_of_this_servers_models() -> None:
    # Found by the contract fuzzer: a remote agent's spec with a ``model`` (not validated, as
    # the agent runs elsewhere) made every turn of its sessions a 503 "model ... is not ready".
    remote = AgentSpec.model_validate({"remote": "https://agents.example.com/a2a/x/", "model": "?"})
    assert remote.model_names() == set()
    spec = AgentSpec.model_validate(
        {"kind": "agent", "model": "echo", "sub_agents": {"x": remote.model_dump()}}
    )
    assert spec.model_names() == {"echo"}


async def test_chat_completions_run_a_remote_agent_as_the_model(
    base_url: str, http: httpx.AsyncClient, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A remote agent as a chat model runs on its server (no readiness check of a model this
    server does not have: it answered 503 "model None is not ready"), with or without a
    session."""
    await make_agent(http, "bob", model="poet")  # server B
    monkeypatch.setenv("AGENTSTATION_REMOTE_KEY_BOB", KEY_A)
    other_db = f"sqlite+aiosqlite:///{tmp_path / 'front.db'}"
    await asyncio.to_thread(upgrade, other_db)
    with live_server(make_settings(other_db, outbound_allow="127.0.0.1")) as server_a:
        headers = {"Authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(base_url=server_a, headers=headers, timeout=30) as a:
            spec = {"remote": f"{base_url}/a2a/bob/", "api_key_env": "AGENTSTATION_REMOTE_KEY_BOB"}
            resp = await a.post("/v1/agents", json={"name": "far-bob", "spec": spec})
            assert resp.status_code == 201, resp.text
            body = {"model": "far-bob", "messages": [{"role": "user", "content": "Hi"}]}
            stateless = await a.post("/v1/chat/completions", json=body)
            assert stateless.status_code == 200, stateless.text
            assert stateless.json()["choices"][0]["message"]["content"] == "Roses are red."
            on_session = await a.post(
                "/v1/chat/completions", json=body, headers={"X-Session-Id": "far-1"}
            )
            assert on_session.status_code == 200, on_session.text
            assert on_session.json()["choices"][0]["message"]["content"] == "Violets are blue."
            streamed = await a.post("/v1/chat/completions", json={**body, "stream": True})
            assert streamed.status_code == 200 and "Roses are red." in "".join(
                json.loads(line[6:])["choices"][0]["delta"].get("content") or ""
                for line in streamed.text.splitlines()
                if line.startswith("data: {") and json.loads(line[6:])["choices"]
            )
