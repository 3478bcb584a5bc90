"""Stateless chat with an agent (model = agent, no X-Session-Id): one shared agent object.

Requests of a shared kind run in one agent built per cached directory entry, each under a
session id of its own whose memory is dropped when the request ends (AppState.stateless_agent,
app.services.chat.stateless_pieces).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from agents.agent import AsyncAgent, BaseAgent
from agents.schema import AgentMessage, AgentStatusCode
from app.main import create_app
from app.runtime.registry import BuildContext
from app.schemas.agents import AgentSpec
from app.schemas.openai import ChatCompletionRequest
from app.services import chat
from app.services.agent_directory import AgentInfo
from app.settings import Settings
from app.state import AppState
from tests.app.conftest import MODELS, make_agent
from tests.lifespan import LifespanManager

# Echoes the last user message word by word with a pause between words, so concurrent
# requests interleave inside the one shared agent.
DRIP = {"name": "drip", "backend": "scripted", "chunk_delay_s": 0.01}


@pytest.fixture
async def app(settings_factory: Callable[..., Settings]) -> AsyncIterator[FastAPI]:
    """The conftest's app with the DRIP model too (conftest's ``client`` uses this app)."""
    application = create_app(settings_factory(models=json.dumps([*MODELS, DRIP])))
    async with LifespanManager(application):
        yield application


def state_of(app: FastAPI) -> AppState:
    state: AppState = app.state.agentstation
    return state


async def info_of(app: FastAPI, name: str) -> AgentInfo:
    state = state_of(app)
    info = await state.agents.find(state.sessionmaker, "a", name)
    assert info is not None
    return info


def shared_agent(info: AgentInfo) -> BaseAgent:
    assert info.built is not None
    agent = info.built[1]
    assert isinstance(agent, BaseAgent)
    return agent


def count_builds(app: FastAPI, kind: str = "agent") -> list[str | None]:
    """The names of the agents built of ``kind`` from now on."""
    built: list[str | None] = []
    entry = state_of(app).registry.kinds[kind]
    build = entry.build

    def counting(spec: AgentSpec, ctx: BuildContext) -> Any:
        built.append(ctx.name)
        return build(spec, ctx)

    entry.build = counting
    return built


def stream_text(text: str) -> str:
    out = []
    for block in text.strip().split("\n\n"):
        payload = block.removeprefix("data: ")
        choices = [] if payload == "[DONE]" else json.loads(payload)["choices"]
        out += [c["delta"].get("content", "") for c in choices]
    return "".join(out)


async def test_concurrent_requests_share_one_agent_but_not_their_messages(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", model="drip")
    builds = count_builds(app)

    async def ask(i: int) -> tuple[str, dict[str, int]]:
        words = " ".join(f"w{i}" for _ in range(i % 4 + 2))  # 2..5 words of its own
        body = {
            "model": "helper",
            "messages": [
                {"role": "user", "content": f"earlier {i}"},
                {"role": "assistant", "content": f"answer {i}"},
                {"role": "user", "content": words},
            ],
        }
        if i % 2:  # half of them streamed
            body |= {"stream": True, "stream_options": {"include_usage": True}}
            resp = await client.post("/v1/chat/completions", json=body)
            assert resp.status_code == 200, resp.text
            last = json.loads(resp.text.strip().split("\n\n")[-2].removeprefix("data: "))
            return stream_text(resp.text), last["usage"]
        resp = await client.post("/v1/chat/completions", json=body)
        assert resp.status_code == 200, resp.text
        return resp.json()["choices"][0]["message"]["content"], resp.json()["usage"]

    results = await asyncio.gather(*(ask(i) for i in range(16)))
    for i, (text, usage) in enumerate(results):
        n = i % 4 + 2
        assert text == " ".join(f"w{i}" for _ in range(n))
        # Its own history (2 + 2 words) and question: nothing of another request's.
        assert usage == {"prompt_tokens": 4 + n, "completion_tokens": n, "total_tokens": 4 + 2 * n}
    assert builds == ["helper"]  # one agent object served all 16
    assert shared_agent(await info_of(app, "helper")).memory.memory_map == {}  # none kept


async def test_an_updated_agent_is_used_after_the_change(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    await make_agent(client, "helper", model="echo")
    body = {"model": "helper", "messages": [{"role": "user", "content": "one two three"}]}
    first = await client.post("/v1/chat/completions", json=body)
    assert first.json()["choices"][0]["message"]["content"] == "one two three"
    before = shared_agent(await info_of(app, "helper"))
    spec = {"kind": "agent", "model": "echo", "gen_params": {"max_new_tokens": 2}}
    assert (await client.put("/v1/agents/helper", json={"spec": spec})).status_code == 200
    second = await client.post("/v1/chat/completions", json=body)
    # The new spec's max_new_tokens: 2 words.
    assert second.json()["choices"][0]["message"]["content"] == "one two "
    assert shared_agent(await info_of(app, "helper")) is not before
    put = await client.put("/v1/agents/helper", json={"spec": {"kind": "agent", "model": "poet"}})
    assert put.status_code == 200
    third = await client.post("/v1/chat/completions", json=body)
    assert third.json()["choices"][0]["message"]["content"] == "Roses are red."


class _Exploding(AsyncAgent):
    """A shared agent whose turn fails after its first chunk."""

    async def forward(self, *message: AgentMessage, session_id: Any = 0, **kwargs: Any) -> Any:
        yield AgentMessage(
            sender=self.name, content="partial", stream_state=AgentStatusCode.STREAM_ING
        )
        raise RuntimeError("model exploded")


async def test_no_memory_is_kept_after_a_failed_or_abandoned_request(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    state = state_of(app)
    state.registry.add_kind(
        "exploding", lambda spec, ctx: _Exploding(name=ctx.name), supports_tools=False, shared=True
    )
    await make_agent(client, "fragile", kind="exploding")
    body = {"model": "fragile", "messages": [{"role": "user", "content": "x"}], "stream": True}
    resp = await client.post("/v1/chat/completions", json=body)
    frames = resp.text.strip().split("\n\n")
    assert json.loads(frames[-2].removeprefix("data: "))["error"]["code"] == "internal_error"
    assert shared_agent(await info_of(app, "fragile")).memory.memory_map == {}

    # A client that stops reading mid-answer: the generator is closed, the memory dropped.
    await make_agent(client, "helper", model="slow")  # one word every 0.2 s
    info = await info_of(app, "helper")
    req = ChatCompletionRequest.model_validate(
        {
            "model": "helper",
            "messages": [
                {"role": "user", "content": "before"},
                {"role": "assistant", "content": "reply"},
                {"role": "user", "content": "go"},
            ],
            "stream": True,
        }
    )
    pieces = chat.stateless_pieces(state, info, req)
    assert (await anext(pieces)).text == "one "
    memory = shared_agent(info).memory
    assert [len(m) for m in memory.memory_map.values()] == [3]  # history + question, in flight
    await pieces.aclose()
    assert memory.memory_map == {}


async def test_only_kinds_without_per_call_state_are_shared(
    app: FastAPI, client: httpx.AsyncClient
) -> None:
    registry = state_of(app).registry
    assert registry.shared(AgentSpec(kind="agent", model="echo"))
    assert not registry.shared(AgentSpec(kind="tool_agent", model="echo"))  # executors
    registry.add_kind("custom", registry.kinds["agent"].build)  # entry points: not by default
    assert not registry.shared(AgentSpec(kind="custom", model="echo"))
    builds = count_builds(app, "custom")
    await make_agent(client, "mine", kind="custom")
    body = {"model": "mine", "messages": [{"role": "user", "content": "hello there"}]}
    for _ in range(2):
        resp = await client.post("/v1/chat/completions", json=body)
        assert resp.json()["choices"][0]["message"]["content"] == "hello there"
    assert builds == ["mine", "mine"]  # built per request
    assert (await info_of(app, "mine")).built is None
