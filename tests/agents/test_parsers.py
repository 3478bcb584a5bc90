"""Parsers: ToolParser, MixedToolParser, JSONParser, StrParser."""

from __future__ import annotations

import pytest
from pydantic import BaseModel, Field

from agents.parsers import (
    InterpreterParser,
    JSONParser,
    MixedToolParser,
    PluginParser,
    StrParser,
    ToolParser,
    ToolStatusCode,
)

CODE = ToolParser("code interpreter", begin="```python\n", end="\n```\n")


def test_tool_parser_finds_the_call() -> None:
    text = "Think first.\n```python\nprint(1)\n```\nand more"
    assert CODE.parse_response(text) == {
        "tool_type": "code interpreter",
        "thought": "Think first.\n",
        "action": "print(1)",
        "status": 1,
    }
    # The end marker may be missing when it was a stop word.
    assert CODE.parse_response("x```python\nprint(2)")["action"] == "print(2)"


def test_tool_parser_without_a_call() -> None:
    assert CODE.parse_response("Just the answer: 42") == {
        "tool_type": None,
        "thought": "Just the answer: 42",
        "action": None,
        "status": ToolStatusCode.NO_TOOL,
    }


def test_tool_parser_validation_failure_is_status_minus_one() -> None:
    parser = ToolParser("plugin", begin="```json\n", end="\n```\n", validate="json")
    good = parser.parse_response(
        'Use it.\n```json\n{"name": "Calc", "parameters": {"a": 1}}\n```\n'
    )
    assert good["status"] == 1
    assert good["action"] == {"name": "Calc", "parameters": {"a": 1}}
    bad = parser.parse_response("Use it.\n```json\n{name: Calc\n```\n")
    assert bad == {"tool_type": "plugin", "thought": "Use it.\n", "action": "{name: Calc",
                   "status": -1}  # fmt: skip
    assert "JSON" in parser.explain_error(bad) or "Expecting" in parser.explain_error(bad)
    with pytest.raises(ValueError, match="unknown validator"):
        ToolParser("x", validate="os.system")


def test_format_response_round_trips() -> None:
    parser = ToolParser("plugin", begin="<c>", end="</c>", validate="json")
    parsed = parser.parse_response('hi<c>{"name": "工具"}</c>')
    assert parser.format_response(parsed) == 'hi<c>{"name": "工具"}</c>'
    assert parser.format_response({"thought": "t", "action": None}) == "t"


def test_mixed_parser_picks_the_first_call() -> None:
    mixed = MixedToolParser(
        "assistant", template="{x}", x="Use tools.", parsers=[InterpreterParser(), PluginParser()]
    )
    text = 'a<|action_start|><|plugin|>\n{"name": "W"}<|action_end|>\n'
    text += "<|action_start|><|interpreter|>\nprint(1)<|action_end|>\n"
    parsed = mixed.parse_response(text)
    assert parsed["tool_type"] == "plugin" and parsed["action"] == {"name": "W"}
    assert mixed.parse_response("none")["status"] == 0
    assert mixed.format_response(parsed).startswith("a<|action_start|><|plugin|>\n")
    assert mixed.format_instruction() == [
        {"role": "system", "content": "Use tools.", "name": "assistant"}
    ]


class Person(BaseModel):
    name: list[str] = Field(description="Name of the person")
    age: int = Field(description="Age of the person")


def test_json_parser_strips_fences_and_validates() -> None:
    parser = JSONParser(template="Reply as\n{format}", format=Person)
    reply = 'Sure:\n```json\n{"name": ["John"],\n// a comment\n "age": 30}\n```'
    assert parser.parse_response(reply) == {
        "status": 1,
        "data": {"name": ["John"], "age": 30},
        "message": None,
    }
    assert parser.parse('{"name": ["A"], "age": 1}') == Person(name=["A"], age=1)
    instruction = parser.format_instruction()
    assert '"age": "int"  // required' in instruction and "// Age of the person" in instruction


def test_json_parser_failures_never_raise() -> None:
    parser = JSONParser(format=Person)
    broken = parser.parse_response("```json\n{oops\n```")
    assert broken["status"] == -1 and "not a valid JSON" in broken["message"]
    wrong = parser.parse_response('{"name": "x"}')
    assert wrong["status"] == -1 and "Person" in wrong["message"]
    assert JSONParser().parse_response("[1, 2]") == {"status": 1, "data": [1, 2], "message": None}


def test_str_parser_template_fields() -> None:
    assert StrParser("Answer in {lang}", lang="English").format_instruction() == "Answer in English"
    assert StrParser().parse_response("x") == "x"
    with pytest.raises(ValueError, match="lang"):
        StrParser("Answer in {lang}")
