"""DefaultAggregator and ToolAggregator: what the model receives."""

from __future__ import annotations

import pytest

from agents.aggregator import DefaultAggregator, InternLMToolAggregator, ToolAggregator
from agents.memory import Memory
from agents.parsers import ToolParser
from agents.schema import ActionReturn, ActionStatusCode, AgentMessage

PARSER = ToolParser("interpreter", begin="<code>\n", end="</code>\n")


def _memory(*messages: AgentMessage) -> Memory:
    memory = Memory()
    memory.add(list(messages))
    return memory


def test_default_aggregator_roles_merging_and_system() -> None:
    memory = _memory(
        AgentMessage(sender="user", content="a"),
        AgentMessage(sender="critic", content="b"),
        AgentMessage(sender="bot", content="c"),
        AgentMessage(sender="ActionExecutor", content=ActionReturn(result=[
            {"type": "text", "content": "out"}])),
    )  # fmt: skip
    assert DefaultAggregator().aggregate(memory, "bot", None, "sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "c"},
        {"role": "user", "content": "out"},
    ]


def test_system_instruction_forms_and_lagent_alias() -> None:
    agg = DefaultAggregator()
    msg = {"role": "system", "content": "x"}
    assert agg.aggregate_system_intruction("x") == [msg]
    assert agg.aggregate_system_instruction(msg) == [msg]
    assert agg.aggregate_system_instruction([msg, msg]) == [msg, msg]
    with pytest.raises(KeyError):
        agg.aggregate_system_instruction({"role": "system"})


def test_tool_aggregator_renders_calls_results_and_failed_parses() -> None:
    call = PARSER.parse_response("Let me run it.\n<code>\nprint(1)</code>\n")
    failed = {"tool_type": "interpreter", "thought": "Oops ", "action": "1 +", "status": -1}
    memory = _memory(
        AgentMessage(sender="user", content="compute"),
        AgentMessage(sender="bot", content="Let me run it.\n<code>\nprint(1)", formatted=call),
        AgentMessage(sender="ActionExecutor", content=ActionReturn(
            result=[{"type": "text", "content": "1"}])),
        AgentMessage(sender="bot", content="Oops <code>\n1 +", formatted=failed),
        AgentMessage(sender="ActionExecutor", content=ActionReturn(
            errmsg="SyntaxError: invalid syntax", state=ActionStatusCode.API_ERROR)),
    )  # fmt: skip
    agg = ToolAggregator(environment_begin="[", environment_end="]")
    assert agg.aggregate(memory, "bot", PARSER, "sys") == [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "compute"},
        {"role": "assistant", "content": "Let me run it.\n<code>\nprint(1)</code>\n"},
        {"role": "environment", "content": "[1]", "name": "interpreter"},
        {"role": "assistant", "content": "Oops <code>\n1 +</code>\n"},
        {"role": "environment", "content": "[SyntaxError: invalid syntax]", "name": "interpreter"},
    ]
    assert InternLMToolAggregator is ToolAggregator


def test_tool_aggregator_few_shot_and_instruction() -> None:
    parser = ToolParser("interpreter", template="Use {begin}", begin="<code>\n", end="</code>\n")
    shots = [[
        {"role": "user", "content": "1+1?"},
        {"role": "thought", "content": "compute "},
        {"role": "tool", "name": "interpreter", "content": "1+1"},
        {"role": "environment", "content": "2"},
        {"role": "language", "content": "2"},
    ]]  # fmt: skip
    agg = ToolAggregator(few_shot=shots, environment_begin="<out>")
    out = agg.aggregate(Memory(), "bot", parser)
    assert out == [
        {"role": "system", "content": "Use <code>\n", "name": "interpreter"},
        {"role": "user", "content": "1+1?"},
        {"role": "assistant", "content": "compute <code>\n1+1</code>\n"},
        {"role": "environment", "content": "<out>2"},
        {"role": "assistant", "content": "2"},
    ]
    assert shots[0][3]["content"] == "2"  # the few-shot data is not mutated
