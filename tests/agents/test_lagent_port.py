"""The lagent v1 README programs, ported by changing imports only (models are scripted)."""

from __future__ import annotations

import asyncio
import contextlib
import io
import json
from typing import Any

from agents.actions import ActionExecutor, BaseAction
from agents.agent import Agent, AsyncAgent
from agents.aggregator import DefaultAggregator, InternLMToolAggregator
from agents.hooks import Hook, InternLMActionProcessor
from agents.llms import AsyncBaseLLM
from agents.memory import Memory
from agents.parsers import StrParser, ToolParser
from agents.schema import ActionReturn, ActionStatusCode, AgentMessage
from agents.testing import FakeKernel, SyncScriptedLLM

SYSTEM_PROMPT = "你的回答只能从“典”、“孝”、“急”三个字中选一个。"
QUESTION = (
    "Marie is thinking of a multiple of 63, while Jay is thinking of a factor of 63. They happen "
    "to be thinking of the same number. There are two possibilities for the number that each of "
    "them is thinking of, one positive and one negative. Find the product of these two numbers."
)
CODE = "def find_numbers():\n    return 63 * 63.0\n\nresult = find_numbers()\nprint(result)"


def test_models_as_agents_exact_str() -> None:
    llm = SyncScriptedLLM(["急"])
    agent = Agent(llm, SYSTEM_PROMPT)
    bot_msg = agent(AgentMessage(sender="user", content="今天天气情况"))
    assert str(bot_msg) == (
        "content='急' sender='Agent' formatted=None extra_info=None type=None receiver=None "
        "stream_state=<AgentStatusCode.END: 0>"
    )
    assert llm.calls[0]["messages"] == [
        {"role": "system", "content": SYSTEM_PROMPT},
        {"role": "user", "content": "今天天气情况"},
    ]


def test_memory_as_state_and_round_trip() -> None:
    agent = Agent(SyncScriptedLLM(["急"]), SYSTEM_PROMPT)
    agent(AgentMessage(sender="user", content="今天天气情况"))
    memory = agent.memory.get_memory()  # type: ignore[union-attr]
    assert str(memory) == (
        "[AgentMessage(content='今天天气情况', sender='user', formatted=None, extra_info=None, "
        "type=None, receiver=None, stream_state=<AgentStatusCode.END: 0>), "
        "AgentMessage(content='急', sender='Agent', formatted=None, extra_info=None, type=None, "
        "receiver=None, stream_state=<AgentStatusCode.END: 0>)]"
    )
    dumped = agent.state_dict()
    assert list(dumped) == ["memory"]
    assert str(dumped["memory"]) == (
        "[{'content': '今天天气情况', 'sender': 'user', 'formatted': None, 'extra_info': None, "
        "'type': None, 'receiver': None, 'stream_state': <AgentStatusCode.END: 0>}, "
        "{'content': '急', 'sender': 'Agent', 'formatted': None, 'extra_info': None, "
        "'type': None, 'receiver': None, 'stream_state': <AgentStatusCode.END: 0>}]"
    )
    # Through JSON (as the service stores it) and back into a fresh agent.
    restored = Agent(SyncScriptedLLM(["孝"]), SYSTEM_PROMPT)
    restored.load_state_dict(json.loads(json.dumps(dumped)))
    assert restored.state_dict() == dumped
    assert str(restored.memory.get_memory()) == str(memory)  # type: ignore[union-attr]
    agent.memory.reset()  # type: ignore[union-attr]
    assert agent.memory.get_memory() == []  # type: ignore[union-attr]


class FewshotAggregator(DefaultAggregator):
    def __init__(self, few_shot: list[dict[str, Any]] | None = None) -> None:
        self.few_shot = few_shot or []

    def aggregate(
        self,
        messages: Memory,
        name: str,
        parser: StrParser | None = None,
        system_instruction: Any = None,
    ) -> list[dict[str, Any]]:
        _message: list[dict[str, Any]] = []
        if system_instruction:
            _message.extend(self.aggregate_system_intruction(system_instruction))
        _message.extend(self.few_shot)
        for message in messages.get_memory():
            if message.sender == name:
                _message.append(dict(role="assistant", content=str(message.content)))
            else:
                user_message = message.content
                if len(_message) > 0 and _message[-1]["role"] == "user":
                    _message[-1]["content"] += user_message
                else:
                    _message.append(dict(role="user", content=user_message))
        return _message


def test_fewshot_aggregator_model_sees_shots_then_user_turn() -> None:
    llm = SyncScriptedLLM(["【多云转晴，夜间有轻微降温】"])
    shots = [{"role": "user", "content": "今天天气"}, {"role": "assistant", "content": "【晴】"}]
    agent = Agent(llm, aggregator=FewshotAggregator(shots))
    bot_msg = agent(AgentMessage(sender="user", content="昨天天气"))
    assert bot_msg.content == "【多云转晴，夜间有轻微降温】"
    assert llm.calls[0]["messages"] == [*shots, {"role": "user", "content": "昨天天气"}]


def test_tool_parser_response_formatting() -> None:
    reply = "首先，我们需要...\n\n```python\n" + CODE
    llm = SyncScriptedLLM([reply + "\n```\nignored"])
    parser = ToolParser(tool_type="code interpreter", begin="```python\n", end="\n```\n")
    llm.gen_params["stop_words"].append("\n```\n")
    agent = Agent(llm, "逐步分析并编写Python代码解决以下问题。", output_format=parser)
    bot_msg = agent(AgentMessage(sender="user", content=QUESTION))
    dumped = json.loads(bot_msg.model_dump_json(indent=4))
    assert dumped == {
        "content": reply,
        "sender": "Agent",
        "formatted": {
            "tool_type": "code interpreter",
            "thought": "首先，我们需要...\n\n",
            "action": CODE,
            "status": 1,
        },
        "extra_info": None,
        "type": None,
        "receiver": None,
        "stream_state": 0,
    }


class CodeProcessor(Hook):
    def before_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        message = message.copy(deep=True)
        message.content = dict(
            name="IPythonInteractive", parameters={"command": message.formatted["action"]}
        )
        return message

    def after_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        action_return = message.content
        if isinstance(action_return, ActionReturn):
            if action_return.state == ActionStatusCode.SUCCESS:
                response = action_return.format_result()
            else:
                response = action_return.errmsg
        else:
            response = action_return
        message.content = response
        return message


def test_executor_hooks_consistency_of_tool_calling() -> None:
    executor = ActionExecutor(actions=[FakeKernel()], hooks=[CodeProcessor()])
    bot_msg = AgentMessage(
        sender="Agent",
        content="首先，我们需要...",
        formatted={
            "tool_type": "code interpreter",
            "thought": "首先，我们需要...",
            "action": CODE,
            "status": 1,
        },
    )
    executor_msg = executor(bot_msg)
    assert executor_msg.content == "3969.0"
    assert executor_msg.formatted is None
    # lagent's ready-made processor does the same for ToolParser output.
    processed = ActionExecutor([FakeKernel()], hooks=[InternLMActionProcessor()])(bot_msg)
    assert processed.content == "3969.0"


class PythonExec(BaseAction):
    """Run Python code and return what it printed (a plain, unsandboxed test action)."""

    def run(self, command: str) -> str:
        """Execute code.

        Args:
            command: Python source code.
        """
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(command, {})
        return out.getvalue().strip()


class Coder(Agent):
    def __init__(self, llm: Any, system_prompt: str, max_turn: int = 3) -> None:
        super().__init__()
        self.agent = Agent(
            llm,
            system_prompt,
            output_format=ToolParser(
                tool_type="code interpreter", begin="```python\n", end="\n```\n"
            ),
            aggregator=InternLMToolAggregator(),
        )
        self.executor = ActionExecutor([PythonExec()], hooks=[CodeProcessorFor("PythonExec")])
        self.max_turn = max_turn

    def forward(self, message: AgentMessage, session_id: Any = 0) -> AgentMessage:
        for _ in range(self.max_turn):
            message = self.agent(message, session_id=session_id)
            if message.formatted["tool_type"] is None:
                return message
            message = self.executor(message, session_id=session_id)
        return message


class CodeProcessorFor(CodeProcessor):
    def __init__(self, tool: str) -> None:
        self.tool = tool

    def before_action(self, executor: Any, message: AgentMessage, session_id: Any) -> Any:
        message = super().before_action(executor, message, session_id)
        message.content["name"] = self.tool
        return message


def test_coder_loop_runs_real_code() -> None:
    llm = SyncScriptedLLM(
        [
            "Compute it.\n```python\nprint(2 / 10)\n```\n",
            "The projection scale is 0.2, so the answer is $\\frac{1}{5} b$.",
        ],
        stop_words=["\n```\n"],
    )
    coder = Coder(llm, "Solve the problem step by step with assistance of Python code")
    answer = coder(AgentMessage(sender="user", content="Find the projection of a onto b."))
    assert answer.content.endswith("$\\frac{1}{5} b$.")
    memory = coder.state_dict()["agent.memory"]
    assert [m["sender"] for m in memory] == ["user", "Agent", "ActionExecutor", "Agent"]
    assert memory[2]["content"] == "0.2"
    # The second model call saw the call it made and the tool's real output.
    second = llm.calls[1]["messages"]
    assert second[-2] == {
        "role": "assistant",
        "content": "Compute it.\n```python\nprint(2 / 10)\n```\n",
    }
    assert second[-1] == {"role": "environment", "content": "0.2", "name": "code interpreter"}
    assert list(coder.state_dict()) == ["memory", "agent.memory"]


class PrefixedMessageHook(Hook):
    def __init__(self, prefix: str, senders: list[str] | None = None) -> None:
        self.prefix = prefix
        self.senders = senders or []

    def before_agent(self, agent: Any, messages: list[AgentMessage], session_id: Any) -> None:
        for message in messages:
            if message.sender in self.senders:
                message.content = self.prefix + message.content


class RoleLLM(AsyncBaseLLM):
    """Answers as writer or critic depending on the system prompt, naming what it read."""

    async def chat(self, messages: list[dict[str, Any]], **kwargs: Any) -> str:
        await asyncio.sleep(0)  # let the five sessions interleave
        role = "draft" if "writing assistant" in messages[0]["content"] else "critique"
        turn = sum(m["role"] == "assistant" for m in messages) + 1
        return f"{role} {turn} of <{messages[1]['content'][-12:]}>"


class AsyncBlogger(AsyncAgent):
    def __init__(
        self, llm: Any, writer_prompt: str, critic_prompt: str, critic_prefix: str = "",
        max_turn: int = 3,
    ) -> None:  # fmt: skip
        super().__init__()
        self.writer = AsyncAgent(llm, writer_prompt, name="writer")
        self.critic = AsyncAgent(
            llm, critic_prompt, name="critic",
            hooks=[PrefixedMessageHook(critic_prefix, ["writer"])],
        )  # fmt: skip
        self.max_turn = max_turn

    async def forward(self, message: AgentMessage, session_id: Any = 0) -> AgentMessage:
        for _ in range(self.max_turn):
            message = await self.writer(message, session_id=session_id)
            message = await self.critic(message, session_id=session_id)
        return await self.writer(message, session_id=session_id)


async def test_async_blogger_five_concurrent_sessions() -> None:
    prefix = "Reflect and provide critique on the following writing. \n\n"
    blogger = AsyncBlogger(
        RoleLLM(),
        writer_prompt="You are an writing assistant tasked to write engaging blogpost.",
        critic_prompt="Generate critique and recommendations on the writing.",
        critic_prefix=prefix,
    )
    topics = ["AI", "Biotechnology", "New Energy", "Video Games", "Pop Music"]
    prompt = "Write an engaging blogpost on the recent updates in {topic}."
    bot_msgs = await asyncio.gather(
        *[
            blogger(AgentMessage(sender="user", content=prompt.format(topic=t)), session_id=i)
            for i, t in enumerate(topics)
        ]
    )
    for i, topic in enumerate(topics):
        tail = prompt.format(topic=topic)[-12:]
        assert bot_msgs[i].content == f"draft 4 of <{tail}>"
        state = blogger.state_dict(session_id=i)
        assert list(state) == ["memory", "writer.memory", "critic.memory"]
        writer, critic = state["writer.memory"], state["critic.memory"]
        assert [m["sender"] for m in writer] == ["user"] + ["writer", "critic"] * 3 + ["writer"]
        assert [m["sender"] for m in critic] == ["writer", "critic"] * 3
        # Only this session's topic anywhere in its memories.
        others = [t for t in topics if t != topic]
        text = json.dumps(state, ensure_ascii=False)
        assert all(f"updates in {o}." not in text for o in others)
        # The prefix hook touched the critic's copies of the writer's messages, nothing else.
        assert all(m["content"].startswith(prefix) for m in critic if m["sender"] == "writer")
        assert all(not m["content"].startswith(prefix) for m in writer)
        assert all(not m["content"].startswith(prefix) for m in critic if m["sender"] == "critic")
        assert [m["sender"] for m in state["memory"]] == ["user", "writer"]
