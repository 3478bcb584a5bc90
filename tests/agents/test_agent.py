"""Agent / AsyncAgent: the streaming core, hooks, memory per session, registration, state."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents import Agent, AgentMessage, AgentStatusCode, AsyncAgent
from agents.hooks import Hook
from agents.llms import AsyncBaseLLM
from agents.llms.scripted import ScriptExhaustedError
from agents.testing import ScriptedLLM, SyncScriptedLLM

END, STREAM_ING = AgentStatusCode.END, AgentStatusCode.STREAM_ING


async def test_stream_yields_text_so_far_then_end_equal_to_call() -> None:
    agent = AsyncAgent(ScriptedLLM(["The sky is blue."]), "Be brief.")
    chunks = [c async for c in agent.stream("Why is the sky blue?", session_id="a")]
    assert [c.stream_state for c in chunks] == [STREAM_ING] * 4 + [END]
    assert [c.content for c in chunks[:-1]] == [
        "The ",
        "The sky ",
        "The sky is ",
        "The sky is blue.",
    ]
    end = chunks[-1]
    assert end == AgentMessage(sender="AsyncAgent", content="The sky is blue.")
    called = AsyncAgent(ScriptedLLM(["The sky is blue."]), "Be brief.")
    assert await called("Why is the sky blue?", session_id="a") == end
    # Only the END reply is stored, after the input.
    stored = agent.memory.get_memory("a")  # type: ignore[union-attr]
    assert [(m.sender, m.content, m.stream_state) for m in stored] == [
        ("user", "Why is the sky blue?", END),
        ("AsyncAgent", "The sky is blue.", END),
    ]


def test_sync_stream_is_a_generator_over_the_same_core() -> None:
    agent = Agent(SyncScriptedLLM(["one two"]))
    gen = agent.stream("hi")
    chunks = list(gen)
    assert [(c.content, c.stream_state) for c in chunks] == [
        ("one ", STREAM_ING),
        ("one two", STREAM_ING),
        ("one two", END),
    ]
    assert len(agent.memory.get_memory()) == 2  # type: ignore[union-attr]


async def test_per_call_kwargs_override_gen_params_for_that_call_only() -> None:
    llm = ScriptedLLM(["a. b", "a. b"], stop_words=["\n"], temperature=0.7)
    agent = AsyncAgent(llm)
    first = await agent("q", stop_words=["."], temperature=0.0)
    second = await agent("q")
    assert first.content == "a"
    assert second.content == "a. b"
    assert llm.calls[0]["params"]["temperature"] == 0.0
    assert llm.calls[1]["params"]["temperature"] == 0.7
    assert llm.gen_params["stop_words"] == ["\n"]


async def test_conversation_continues_from_memory() -> None:
    llm = ScriptedLLM(["Hello!", "You said hi."])
    agent = AsyncAgent(llm, "sys")
    await agent("hi")
    await agent(AgentMessage(sender="user", content="what did I say?"))
    assert llm.calls[1]["messages"] == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "Hello!"},
        {"role": "user", "content": "what did I say?"},
    ]


class Recorder(Hook):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any, Any]] = []

    def before_agent(self, agent: Any, messages: list[AgentMessage], session_id: Any) -> Any:
        self.seen.append(("before", [m.content for m in messages], session_id))
        return [m.model_copy(update={"content": m.content.upper()}) for m in messages]

    async def after_agent(self, agent: Any, message: AgentMessage, session_id: Any) -> Any:
        await asyncio.sleep(0)
        self.seen.append(("after", message.content, session_id))
        message.content = f"[{message.content}]"
        return None  # changed in place


async def test_sync_and_async_hooks_run_around_the_call() -> None:
    hook = Recorder()
    llm = ScriptedLLM(["ok"])
    agent = AsyncAgent(llm, hooks=[hook])
    original = AgentMessage(sender="user", content="hi")
    reply = await agent(original, session_id=7)
    assert hook.seen == [("before", ["hi"], 7), ("after", "ok", 7)]
    assert llm.calls[0]["messages"] == [{"role": "user", "content": "HI"}]
    assert reply.content == "[ok]"
    assert original.content == "hi"  # the caller's message is never mutated
    # memory holds the reply as produced; after_agent only changes what the caller gets
    assert [m.content for m in agent.memory.get_memory(7)] == ["HI", "ok"]  # type: ignore[union-attr]


async def test_before_agent_may_return_a_single_message() -> None:
    class Replace(Hook):
        def before_agent(self, agent: Any, messages: list[AgentMessage], session_id: Any) -> Any:
            return AgentMessage(sender="user", content="replaced")

    llm = ScriptedLLM(["ok"])
    await AsyncAgent(llm, hooks=Replace())("original")
    assert llm.calls[0]["messages"] == [{"role": "user", "content": "replaced"}]


async def test_removed_hook_no_longer_runs() -> None:
    hook = Recorder()
    agent = AsyncAgent(ScriptedLLM(["a", "b"]))
    handle = agent.register_hook(hook)
    await agent("x")
    handle.remove()
    reply = await agent("y")
    assert len(hook.seen) == 2 and reply.content == "b"


async def test_concurrent_sessions_never_see_each_other() -> None:
    llm = ScriptedLLM(replies=None, chunk_delay_s=0.001)  # echoes the last user message
    agent = AsyncAgent(llm)

    async def talk(session: int) -> list[str]:
        for turn in range(3):
            await agent(f"s{session}-t{turn} words here", session_id=session)
        return [m.content for m in agent.memory.get_memory(session)]  # type: ignore[union-attr]

    results = await asyncio.gather(*[talk(i) for i in range(5)])
    for i, contents in enumerate(results):
        assert contents == [f"s{i}-t{t} words here" for t in range(3) for _ in (0, 1)]
    for call in llm.calls:
        sessions = {m["content"].split("-")[0] for m in call["messages"]}
        assert len(sessions) == 1


class Pipeline(AsyncAgent):
    def __init__(self) -> None:
        super().__init__(memory=None)
        self.first = AsyncAgent(ScriptedLLM(["draft", "draft"]), name="first")
        self.second = AsyncAgent(ScriptedLLM(["final", "final"]), name="second")
        self.llm = ScriptedLLM([])
        self.not_an_agent = 3

    async def forward(self, message: AgentMessage, session_id: Any = 0) -> Any:
        draft = message
        async for draft in self.first.stream(message, session_id=session_id):
            yield draft
        async for chunk in self.second.stream(draft, session_id=session_id):
            yield chunk


async def test_async_generator_forward_streams_sub_agents() -> None:
    agent = Pipeline()
    chunks = [c async for c in agent.stream("go", session_id=1)]
    assert [(c.sender, c.content, c.stream_state) for c in chunks] == [
        ("first", "draft", STREAM_ING),
        ("first", "draft", END),
        ("second", "final", STREAM_ING),
        ("second", "final", END),
    ]
    assert await agent("go", session_id=2) == chunks[-1]
    assert list(agent.state_dict(1)) == ["first.memory", "second.memory"]
    assert [n for n, _ in agent.named_agents()] == ["first", "second"]
    assert [n for n, _ in agent.named_llms()] == ["llm", "first.llm", "second.llm"]


def test_state_dict_load_and_reset_with_dotted_keys() -> None:
    agent = Pipeline()
    asyncio.run(agent("go", session_id="s"))
    state = agent.state_dict("s")
    assert [m["content"] for m in state["first.memory"]] == ["go", "draft"]
    assert [m["content"] for m in state["second.memory"]] == ["draft", "final"]
    assert agent.state_dict("unknown") == {"first.memory": [], "second.memory": []}
    assert agent.state_keys() == ["first.memory", "second.memory"]

    other = Pipeline()
    other.load_state_dict(state, session_id="t")
    assert other.state_dict("t") == state
    with pytest.raises(KeyError, match=r"second\.memory"):
        other.load_state_dict({"first.memory": []}, session_id="t")
    with pytest.warns(UserWarning, match="extra"):
        other.load_state_dict({**state, "extra.memory": []}, session_id="t")
    bad = {**state, "second.memory": [{"sender": "x"}]}  # no content
    with pytest.raises(ValueError):
        other.load_state_dict(bad, session_id="t")
    assert other.state_dict("t") == state  # a bad dump changes nothing

    other.reset("t", keypath="first")
    assert other.state_dict("t")["first.memory"] == []
    assert other.state_dict("t")["second.memory"] == state["second.memory"]
    other.reset("t", recursive=True)
    assert other.state_dict("t") == {"first.memory": [], "second.memory": []}
    with pytest.raises(KeyError):
        other.reset("t", keypath="nope")


async def test_default_name_and_attribute_reassignment() -> None:
    class Writer(AsyncAgent):
        pass

    parent = AsyncAgent()
    parent.child = Writer()
    assert parent.child.name == "Writer"
    assert list(parent.state_dict()) == ["memory", "child.memory"]
    parent.child = None
    assert list(parent.state_dict()) == ["memory"]
    assert repr(Writer(description="d")) == "Writer(name='Writer', description='d')"


class SyncForward(Agent):
    def __init__(self) -> None:
        super().__init__()
        self.inner = Agent(SyncScriptedLLM(["inner reply"]), name="inner")

    def forward(self, message: AgentMessage, session_id: Any = 0) -> str:
        return self.inner(message, session_id=session_id).content + "!"


def test_sync_agent_with_lagent_style_sync_forward() -> None:
    agent = SyncForward()
    reply = agent("hello", session_id=3)
    assert reply == AgentMessage(sender="SyncForward", content="inner reply!")
    assert agent.state_dict(3)["inner.memory"][1]["content"] == "inner reply"


async def test_llm_failure_propagates_and_stores_no_reply() -> None:
    agent = AsyncAgent(ScriptedLLM([RuntimeError("engine down")]))
    with pytest.raises(RuntimeError, match="engine down"):
        await agent("hi")
    assert [m.sender for m in agent.memory.get_memory()] == ["user"]  # type: ignore[union-attr]
    with pytest.raises(ScriptExhaustedError):
        await agent("again")


async def test_agent_without_memory_still_sees_its_input() -> None:
    llm = ScriptedLLM(["ok"])
    agent = AsyncAgent(llm, "sys", memory=None)
    assert (await agent("hi")).content == "ok"
    assert llm.calls[0]["messages"][-1] == {"role": "user", "content": "hi"}
    assert agent.state_dict() == {}


class Counting(AsyncBaseLLM):
    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        return str(len(messages))


async def test_coroutine_forward_returning_a_string() -> None:
    class Custom(AsyncAgent):
        async def forward(self, *message: AgentMessage, session_id: Any = 0) -> str:
            return "plain"

    chunks = [c async for c in Custom().stream("x")]
    assert chunks == [AgentMessage(sender="Custom", content="plain")]
    assert (await AsyncAgent(Counting())("x")).content == "1"


async def test_abandoned_stream_stores_no_reply() -> None:
    agent = AsyncAgent(ScriptedLLM(["a b c d"]))
    stream: AsyncIterator[AgentMessage] = agent.stream("x")
    first = await stream.__anext__()
    assert first.stream_state == STREAM_ING
    await stream.aclose()  # type: ignore[attr-defined]
    assert [m.sender for m in agent.memory.get_memory()] == ["user"]  # type: ignore[union-attr]


async def test_a_closed_stream_closes_forward_at_once() -> None:
    """Closing a turn's stream early closes ``forward``'s generator in the same step (its
    model call stopped: a served model's request aborted), not when it is collected."""
    closed: list[str] = []

    class Streaming(AsyncAgent):
        async def forward(
            self, *message: AgentMessage, session_id: Any = 0, **kwargs: Any
        ) -> AsyncIterator[AgentMessage]:
            try:
                for text in ("a", "a b", "a b c"):
                    yield AgentMessage(sender=self.name, content=text, stream_state=STREAM_ING)
                yield AgentMessage(sender=self.name, content="a b c")
            finally:
                closed.append("forward")

    agent = Streaming()
    stream: AsyncIterator[AgentMessage] = agent.stream("x")
    assert (await stream.__anext__()).content == "a"
    await stream.aclose()  # type: ignore[attr-defined]
    assert closed == ["forward"]
    assert [m.sender for m in agent.memory.get_memory()] == ["user"]  # type: ignore[union-attr]
    # Read to its end, the same stream as before.
    chunks = [c async for c in Streaming().stream("x")]
    assert [c.content for c in chunks] == ["a", "a b", "a b c", "a b c"]
    assert chunks[-1].stream_state == END
    assert closed == ["forward", "forward"]


async def test_the_reply_returned_is_apart_from_the_one_in_memory() -> None:
    """Changing the reply a call returns never changes the session's memory: a plain text
    reply (copied shallowly) and one whose fields hold containers (copied deeply)."""

    class Structured(AsyncAgent):
        async def forward(
            self, *message: AgentMessage, session_id: Any = 0, **kwargs: Any
        ) -> AgentMessage:
            return AgentMessage(sender=self.name, content={"items": [1]}, formatted={"k": [2]})

    plain = AsyncAgent(ScriptedLLM(["hello"]))
    reply = await plain("hi", session_id="s")
    reply.content = "changed"
    assert [m.content for m in plain.memory.get_memory("s")] == ["hi", "hello"]  # type: ignore[union-attr]
    structured = Structured()
    reply = await structured("hi", session_id="s")
    reply.content["items"].append(3)
    reply.formatted["k"].append(4)
    stored = structured.memory.get_memory("s")[-1]  # type: ignore[union-attr]
    assert (stored.content, stored.formatted) == ({"items": [1]}, {"k": [2]})


async def test_the_callers_message_is_apart_from_the_one_in_memory() -> None:
    """A message passed in is copied into memory: changing the caller's message later (a plain
    text one, copied shallowly, or one whose fields hold containers, copied deeply) never
    changes the session's memory, and changes to memory never reach the caller's message."""
    agent = AsyncAgent(ScriptedLLM(["a", "b"]))
    plain = AgentMessage(sender="user", content="hi")
    await agent(plain, session_id="s")
    plain.content = "changed"
    stored = agent.memory.get_memory("s")[0]  # type: ignore[union-attr]
    assert stored is not plain and stored.content == "hi"
    nested = AgentMessage(sender="user", content={"items": [1]}, formatted={"k": [2]})
    await agent(nested, session_id="t")
    nested.content["items"].append(3)
    nested.formatted["k"].append(4)
    stored = agent.memory.get_memory("t")[0]  # type: ignore[union-attr]
    assert (stored.content, stored.formatted) == ({"items": [1]}, {"k": [2]})
    stored.content["items"].append(5)
    assert nested.content == {"items": [1, 3]}
