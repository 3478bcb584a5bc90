"""Byzer-Agent's README programs ported by changing imports (``import byzerllm`` ->
``import agents.conversable as byzerllm``; ``byzerllm.apps.agent*`` -> ``agents.conversable`` /
``agents.user_proxy``; Ray's ``ClientActorHandle`` from ``agents.conversable``), awaiting
``send`` / ``initiate_chat``, and a scripted model for ``byzerllm.ByzerLLM()``: Byzer's
constructor arguments in its order, no directory anywhere, ``self._messages``,
``get_agent_name``, ``@byzerllm.prompt()``, ``Agents.create_remote_agent(AgentB, "bob", llm,
None)`` and dict-style messages."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import agents.conversable as byzerllm
from agents.conversable import (
    Agent,
    Agents,
    ChatResponse,
    ClientActorHandle,
    ConversableAgent,
    get_agent_name,
)
from agents.testing import ScriptedLLM
from agents.user_proxy import UserProxyAgent

ByzerLLM = Any
ByzerRetrieval = Any


class AgentA(ConversableAgent):
    @byzerllm.prompt()
    def agent_prompt(self) -> str:
        """
        你是一个友善的Agent,你的名字叫Alice。
        当有人问你 "你是谁?" 的时候,你会回答 "我是Alice,很高兴认识你!"
        然后你会将收到的消息转发给你的好友Bob。
        """

    def __init__(
        self,
        name: str,
        llm: ByzerLLM,
        retrieval: ByzerRetrieval,
        bob: Agent | ClientActorHandle | str,
        system_message: str | None = None,
        is_termination_msg: Callable[[dict[str, Any]], bool] | None = None,
        max_consecutive_auto_reply: int | None = None,
        human_input_mode: str | None = "NEVER",
        **kwargs: Any,
    ) -> None:
        system_message = self.agent_prompt()
        super().__init__(
            name,
            llm,
            retrieval,
            system_message,
            is_termination_msg,
            max_consecutive_auto_reply,
            human_input_mode,  # type: ignore[arg-type]
            **kwargs,
        )
        self.bob = bob

    @byzerllm.agent_reply()
    async def introduce_self(
        self,
        raw_message: dict[str, Any] | str | ChatResponse | None = None,
        messages: list[dict[str, Any]] | None = None,
        sender: Agent | ClientActorHandle | str | None = None,
        config: Any | None = None,
    ) -> tuple[bool, str | dict[str, Any] | ChatResponse | None]:
        # forward the message to bob
        await self.send(raw_message, self.bob)
        # get the last message from bob
        # _messages is a dictionary with agent names as keys and a list of messages as values
        # you can use the get_agent_name function to get the name of an agent
        message = self._messages[get_agent_name(self.bob)][-1]
        self.heard = message["content"]
        return True, None

    @byzerllm.agent_reply(lambda self: [self.bob])
    def reply_bob(
        self,
        raw_message: dict[str, Any] | str | ChatResponse | None = None,
        messages: list[dict[str, Any]] | None = None,
        sender: Agent | ClientActorHandle | str | None = None,
        config: Any | None = None,
    ) -> tuple[bool, str | dict[str, Any] | ChatResponse | None]:
        # we don't want to reply to bob
        return True, None


class AgentB(ConversableAgent):
    @byzerllm.prompt()
    def agent_prompt(self) -> str:
        """
        你是一个友善的Agent,你的名字叫Bob。
        当有人问 "你是谁?" 的时候,你会回答 "我是Bob,Alice的好朋友,很高兴认识你!"
        """

    def __init__(
        self,
        name: str,
        llm: ByzerLLM,
        retrieval: ByzerRetrieval,
        system_message: str | None = None,
        is_termination_msg: Callable[[dict[str, Any]], bool] | None = None,
        max_consecutive_auto_reply: int | None = None,
        human_input_mode: str | None = "NEVER",
        **kwargs: Any,
    ) -> None:
        system_message = self.agent_prompt()
        super().__init__(
            name,
            llm,
            retrieval,
            system_message,
            is_termination_msg,
            max_consecutive_auto_reply,
            human_input_mode,  # type: ignore[arg-type]
            **kwargs,
        )

    @byzerllm.agent_reply()
    def introduce_self(
        self,
        raw_message: dict[str, Any] | str | ChatResponse | None = None,
        messages: list[dict[str, Any]] | None = None,
        sender: Agent | ClientActorHandle | str | None = None,
        config: Any | None = None,
    ) -> tuple[bool, str | dict[str, Any] | ChatResponse | None]:
        return True, {"content": "我是Bob,Alice的好朋友,很高兴认识你!", "metadata": {}}


def _transcript(*agents: ConversableAgent) -> list[tuple[str, str, str]]:
    directory = agents[0].directory
    assert all(a.directory is directory for a in agents)  # one directory, made as they met
    return [(m.sender, str(m.receiver), m.content) for m in directory.transcript]


async def test_readme_section_1_local_agents() -> None:
    llm = ScriptedLLM([])
    bob = AgentB("bob", llm=llm, retrieval=None)
    alice = AgentA("alice", llm=llm, retrieval=None, bob=bob)
    user = UserProxyAgent(
        "user", llm=llm, retrieval=None, human_input_mode="NEVER", max_consecutive_auto_reply=0
    )
    await user.initiate_chat(recipient=alice, clear_history=True, message={"content": "你是谁?"})

    assert _transcript(user, alice, bob) == [
        ("user", "alice", "你是谁?"),
        ("alice", "bob", "你是谁?"),
        ("bob", "alice", "我是Bob,Alice的好朋友,很高兴认识你!"),
    ]
    assert alice.heard == "我是Bob,Alice的好朋友,很高兴认识你!"
    assert alice.agent is not None and alice.agent.template.startswith("你是一个友善的Agent")
    assert llm.calls == []  # the decorated replies answered; the model was never asked


async def test_readme_section_3_remote_agents_by_class() -> None:
    llm = ScriptedLLM([])
    bob = Agents.create_remote_agent(AgentB, "bob", llm, None)
    alice = Agents.create_remote_agent(AgentA, "alice", llm, None, bob=bob)
    user = UserProxyAgent(
        "user", llm=llm, retrieval=None, human_input_mode="NEVER", max_consecutive_auto_reply=0
    )
    await user.initiate_chat(recipient=alice, clear_history=True, message={"content": "你是谁?"})

    assert isinstance(bob, AgentB) and isinstance(alice, AgentA)
    assert _transcript(user, alice, bob)[1:] == [
        ("alice", "bob", "你是谁?"),
        ("bob", "alice", "我是Bob,Alice的好朋友,很高兴认识你!"),
    ]


async def test_readme_section_4_termination_by_metadata_and_dict_messages() -> None:
    class Closer(ConversableAgent):
        @byzerllm.agent_reply()
        def done(self, raw_message, messages=None, sender=None, config=None):  # type: ignore[no-untyped-def]
            topic = raw_message["content"]
            assert raw_message.get("metadata", {}).get("topic") == "tea"
            return True, {"content": f"That is all about {topic}.", "metadata": {"TERMINATE": True}}

    closer = Closer("closer", None, None)
    asker = ConversableAgent("asker", ScriptedLLM(["never used"]), None)
    await asker.initiate_chat(closer, {"content": "tea", "metadata": {"topic": "tea"}})
    assert _transcript(asker, closer) == [
        ("asker", "closer", "tea"),
        ("closer", "asker", "That is all about tea."),
    ]


def test_what_cannot_be_ported_says_what_to_pass() -> None:
    with pytest.raises(TypeError, match="ConversableAgent subclass"):
        Agents.create_remote_agent(object, "x", None, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="UserProxyAgent"):
        ConversableAgent("p", None, None, None, None, None, "ALWAYS")
    one, two = byzerllm.AgentDirectory(), byzerllm.AgentDirectory()
    a = ConversableAgent("a", directory=one)
    ConversableAgent("a", directory=two)
    b = ConversableAgent("b", directory=two)
    with pytest.raises(ValueError, match="different AgentDirectory"):
        a.meet(b)
    c = ConversableAgent("a")  # implicit: it joins, but the name is taken there
    with pytest.raises(ValueError, match="already registered"):
        b.meet(c)


# -- a person asked in the middle of a reply function (the question at depth) ---------------
class Planner(ConversableAgent):
    """Asks the person a question from inside its reply, then goes on with the answer."""

    asking = False

    @byzerllm.agent_reply()
    async def plan(self, raw_message, messages=None, sender=None, config=None):  # type: ignore[no-untyped-def]
        if self.asking:  # the person's answer to our question: the waiting reply reads it
            return True, None
        self.asking = True
        await self.send({"content": "Which city?"}, "user")
        self.asking = False
        city = self._messages["user"][-1]["content"]
        return True, {"content": f"A trip to {city}. TERMINATE", "metadata": {}}


async def test_a_question_at_depth_resumes_where_it_was_asked() -> None:
    from agents.actions.approval import Decision
    from agents.user_proxy import WAIT, Conversation

    user = UserProxyAgent("user", human_input_mode="ALWAYS", human_input=WAIT)
    planner = Planner("planner", None, None)
    chat = Conversation(user, planner)

    reply = await chat("Plan a trip.", session_id="s")
    assert reply.content == "Which city?"
    (call,) = chat.pending["s"].calls
    assert "Which city?" in call.arguments["prompt"]

    # The planner's reply function is still waiting inside its send(): the answer reaches it.
    said = [m async for m in chat.resume_stream({call.id: Decision.edit({"reply": "Paris"})}, "s")]
    assert [(m.sender, m.receiver, m.content) for m in said] == [
        ("user", "planner", "Paris"),
        ("planner", "user", "A trip to Paris. TERMINATE"),
    ]
    (call,) = chat.pending["s"].calls  # asked about the closing message too (ALWAYS)
    reply = await chat.resume({call.id: Decision.deny()}, session_id="s")
    assert "s" not in chat.pending and reply.content == ""
    assert [m.content for m in user.directory.transcript] == [
        "Plan a trip.", "Which city?", "Paris", "A trip to Paris. TERMINATE",
    ]  # fmt: skip


async def test_what_follows_an_answer_counts_in_the_turn_that_answered() -> None:
    from agents.actions.approval import Decision
    from agents.llms.base import usage_scope
    from agents.user_proxy import WAIT, Conversation

    user = UserProxyAgent("user", human_input_mode="ALWAYS", human_input=WAIT)
    poet = ConversableAgent("poet", ScriptedLLM(["Roses are red.", "Violets are blue too."]))
    chat = Conversation(user, poet)
    with usage_scope() as first:
        await chat("A poem, please.", session_id="s")
    spent = first.total_tokens
    (call,) = chat.pending["s"].calls
    with usage_scope() as second:
        reply = await chat.resume({call.id: Decision.edit({"reply": "More!"})}, session_id="s")
    assert reply.content == "Violets are blue too."
    assert second.completion_tokens == 4 and first.total_tokens == spent  # the second turn's
