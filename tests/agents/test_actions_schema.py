"""@tool_api: JSON Schema from hints and docstrings, lagent descriptions, plugin prompts."""

from __future__ import annotations

import enum
import json
import subprocess
import sys
from typing import Annotated, Any, List, Literal, Optional  # noqa: UP035 - List is under test

import pytest
from pydantic import BaseModel

from agents.actions import BaseAction, Calculator, get_plugin_prompt, to_openai_tools, tool_api

JSON_RULE = "如果调用该工具，你必须使用Json格式 {key: value} 传参，其中key为参数名称"


class Color(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Point(BaseModel):
    x: int
    y: int = 0


class Search(BaseAction):
    """Searches documents."""

    @tool_api
    def query(
        self,
        text: str,
        tags: List[str],  # noqa: UP006
        mode: Literal["fast", "exact"] = "fast",
        limit: Optional[int] = None,  # noqa: UP045
        scores: list[float] | None = None,
    ) -> str:
        """Find documents.

        Args:
            text: what to look for
            tags: labels the documents
                must carry
            mode: how to match
            limit: at most this many
            scores: minimum scores
        """
        return text

    @tool_api
    async def near(self, where: Point, color: Color, weights: dict[str, int]) -> str:
        """Documents near a point.

        Parameters
        ----------
        where : Point
            the point
        color : Color
            a color
        weights : dict
            per-field weights
        """
        return "near"


class Bold(BaseAction):
    """Makes text bold."""

    def run(self, text: Annotated[str, "the text"], times: int = 1) -> str:
        return "**" + text * times + "**"


def test_toolkit_openai_schema_is_exact() -> None:
    tools = to_openai_tools(Search())
    assert tools[0] == {
        "type": "function",
        "function": {
            "name": "Search__query",
            "description": "Find documents.",
            "parameters": {
                "type": "object",
                "properties": {
                    "text": {"type": "string", "description": "what to look for"},
                    "tags": {
                        "type": "array",
                        "items": {"type": "string"},
                        "description": "labels the documents must carry",
                    },
                    "mode": {
                        "type": "string",
                        "enum": ["fast", "exact"],
                        "description": "how to match",
                        "default": "fast",
                    },
                    "limit": {"type": "integer", "description": "at most this many"},
                    "scores": {
                        "type": "array",
                        "items": {"type": "number"},
                        "description": "minimum scores",
                    },
                },
                "required": ["text", "tags"],
            },
        },
    }


def test_models_enums_and_dicts_with_numpy_docstring() -> None:
    # A pydantic model parameter is inlined (pydantic's schema, titles removed).
    params = to_openai_tools(Search())[1]["function"]["parameters"]
    assert params == {
        "type": "object",
        "properties": {
            "where": {
                "type": "object",
                "properties": {"x": {"type": "integer"}, "y": {"type": "integer", "default": 0}},
                "required": ["x"],
                "description": "the point",
            },
            "color": {"type": "string", "enum": ["red", "blue"], "description": "a color"},
            "weights": {
                "type": "object",
                "additionalProperties": {"type": "integer"},
                "description": "per-field weights",
            },
        },
        "required": ["where", "color", "weights"],
    }


def test_single_run_tool_uses_class_name_and_annotated_description() -> None:
    assert to_openai_tools([Bold()]) == [
        {
            "type": "function",
            "function": {
                "name": "Bold",
                "description": "Makes text bold.",
                "parameters": {
                    "type": "object",
                    "properties": {
                        "text": {"type": "string", "description": "the text"},
                        "times": {"type": "integer", "default": 1},
                    },
                    "required": ["text"],
                },
            },
        }
    ]
    assert not Bold().is_toolkit and Search().is_toolkit
    assert to_openai_tools(Search(), separator=".")[0]["function"]["name"] == "Search.query"


def test_lagent_description_shape() -> None:
    assert Bold().description == {
        "name": "Bold",
        "description": "Makes text bold.",
        "parameters": [
            {"name": "text", "type": "STRING", "description": "the text"},
            {"name": "times", "type": "NUMBER", "description": ""},
        ],
        "required": ["text"],
        "parameter_description": JSON_RULE,
    }
    api = Search().description["api_list"][0]
    assert api["name"] == "query"
    assert [p["type"] for p in api["parameters"]] == [
        "STRING",
        "Array",
        "STRING",
        "NUMBER",
        "Array",
    ]


def test_docstring_types_when_hints_are_missing() -> None:
    class Calc(BaseAction):
        """Calculator."""

        @tool_api
        def add(self, a, b):  # type: ignore[no-untyped-def]
            """Add operation.

            Args:
                a (int): augend
                b (list[str]): addend
            """

    params = to_openai_tools(Calc())[0]["function"]["parameters"]
    assert params["properties"] == {
        "a": {"type": "integer", "description": "augend"},
        "b": {"type": "array", "items": {"type": "string"}, "description": "addend"},
    }


def test_get_plugin_prompt_matches_lagent() -> None:
    prompt = json.loads(get_plugin_prompt([Bold(), Search()]))
    assert prompt[0] == {
        "name": "Bold",
        "description": (
            "This is the subfunction for tool 'Bold', you can use this tool. "
            "The description of this function is: \nMakes text bold."
        ),
        "parameters": [{"name": "text", "type": "STRING", "description": "the text"}],
        "required": ["text"],
        "parameter_description": JSON_RULE,
    }
    assert [p["name"] for p in prompt[1:]] == ["Search.query", "Search.near"]
    assert [p["name"] for p in prompt[1]["parameters"]] == ["text", "tags"]  # required only
    assert "如果调用该工具" in get_plugin_prompt(Calculator())  # UTF-8, not \\u escapes


def test_run_and_apis_cannot_mix() -> None:
    with pytest.raises(TypeError, match="cannot be mixed"):

        class Mixed(BaseAction):
            @tool_api
            def run(self, a: int) -> int:
                return a

            @tool_api
            def other(self, b: int) -> int:
                return b


def test_instance_description_renames_the_tool() -> None:
    tool = Bold(description={**Bold.__tool_description__, "name": "Strong"})
    assert tool.name == "Strong"
    assert to_openai_tools(tool)[0]["function"]["name"] == "Strong"


def test_subclass_inherits_toolkit_apis() -> None:
    class MoreSearch(Search):
        """More searching."""

        @tool_api
        def count(self, text: str) -> int:
            """Count documents."""
            return 1

    assert MoreSearch().api_names() == ["query", "near", "count"]


def test_parameter_named_like_pydantic_attributes() -> None:
    class Odd(BaseAction):
        def run(self, json: str, model_config: int = 0) -> Any:
            return [json, model_config]

    result = Odd()({"json": "j", "model_config": 2})
    assert result.format_result() == '["j", 2]'


def test_package_imports_without_the_sandbox() -> None:
    code = (
        "import sys, agents.actions as a; "
        "assert 'jupyter_client' not in sys.modules; "
        "assert 'agents.actions.ipython' not in sys.modules; "
        "assert a.get_plugin_prompt and a.WebBrowser and a.current_session_id"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_optional_without_default_tuples_and_sets() -> None:
    class Shapes(BaseAction):
        def run(self, size: int | None, pair: tuple[int, str], tags: set[str]) -> str:
            return "ok"

    assert to_openai_tools(Shapes())[0]["function"]["parameters"] == {
        "type": "object",
        "properties": {
            "size": {"anyOf": [{"type": "integer"}, {"type": "null"}]},
            "pair": {
                "type": "array",
                "prefixItems": [{"type": "integer"}, {"type": "string"}],
                "minItems": 2,
                "maxItems": 2,
            },
            "tags": {"type": "array", "items": {"type": "string"}, "uniqueItems": True},
        },
        "required": ["size", "pair", "tags"],
    }
    assert Shapes()({"size": None, "pair": [1, "a"], "tags": ["x"]}).format_result() == "ok"


def test_unresolvable_hint_fails_at_class_definition() -> None:
    class Local:
        pass

    with pytest.raises(TypeError, match="cannot resolve the type hints of"):

        class Broken(BaseAction):
            def run(self, thing: Local) -> str:
                return "never"
