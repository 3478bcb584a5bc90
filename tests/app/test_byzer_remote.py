"""Byzer-Agent's remote agents (README section 3), ported: Bob lives on a live AgentStation
and answers over A2A through ``Agents.create_remote_agent``; Alice forwards to him by name."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from agents.conversable import AgentDirectory, Agents, ConversableAgent, agent_reply
from agents.user_proxy import UserProxyAgent
from app.settings import Settings
from tests.app.conftest import KEY_A, make_agent
from tests.app.live import live_server

pytestmark = pytest.mark.live


@pytest.fixture
def base_url(settings_factory: Callable[..., Settings]) -> Iterator[str]:
    with live_server(settings_factory()) as url:
        yield url


class AgentA(ConversableAgent):
    def __init__(self, name: str, bob: ConversableAgent, **kwargs: object) -> None:
        super().__init__(name, **kwargs)  # type: ignore[arg-type]
        self.bob = bob

    @agent_reply()
    async def introduce_self(self, raw_message, messages=None, sender=None, config=None):  # type: ignore[no-untyped-def]
        await self.send(raw_message, self.bob)  # forward the message to bob
        return True, None

    @agent_reply(lambda self: [self.bob])
    def reply_bob(self, raw_message, messages=None, sender=None, config=None):  # type: ignore[no-untyped-def]
        return True, None  # we don't want to reply to bob


async def test_alice_forwards_to_a_remote_bob(base_url: str) -> None:
    headers = {"Authorization": f"Bearer {KEY_A}"}
    async with httpx.AsyncClient(base_url=base_url, headers=headers, timeout=30) as http:
        await make_agent(http, "bob-agent", model="poet")
    directory = AgentDirectory()
    bob = Agents.create_remote_agent(
        f"{base_url}/a2a/bob-agent/", "bob", directory=directory, api_key=KEY_A
    )
    alice = AgentA("alice", bob=bob, directory=directory)
    user = UserProxyAgent(
        "user", human_input_mode="NEVER", max_consecutive_auto_reply=0, directory=directory
    )
    await user.initiate_chat(recipient=alice, clear_history=True, message={"content": "你是谁?"})
    assert [(m.sender, m.receiver, m.content) for m in directory.transcript] == [
        ("user", "alice", "你是谁?"),
        ("alice", "bob", "你是谁?"),
        ("bob", "alice", "Roses are red."),
    ]
    assert alice.last_message("bob") is not None
    assert alice.get_chat_messages()["bob"][-1].content == "Roses are red."
