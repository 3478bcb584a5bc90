"""The Responses API on the real vLLM CPU engine (the demo model) through the official
``openai`` client: streamed and whole answers agree, ``max_output_tokens`` makes a response
``incomplete``, ``text.format`` json_schema is generated under the schema, and a named
function tool comes back as a ``function_call`` item whose arguments fit its parameters."""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import pytest
from openai import AsyncOpenAI
from openai.types.responses import Response

from tests.vllm.test_gateway import base_url, client  # noqa: F401  (the live gateway)

pytestmark = [pytest.mark.vllm, pytest.mark.live]
CITY = {
    "type": "object",
    "properties": {"city": {"enum": ["Paris", "Oslo"]}},
    "required": ["city"],
    "additionalProperties": False,
}


async def test_stream_and_whole_agree_and_max_output_tokens(client: AsyncOpenAI) -> None:  # noqa: F811
    whole = await client.responses.create(
        model="demo", input="Hello, who are you?", max_output_tokens=12, temperature=0
    )
    Response.model_validate(whole.model_dump(mode="json"))
    assert whole.status == "incomplete" and whole.output_text
    assert whole.incomplete_details is not None
    assert whole.incomplete_details.reason == "max_output_tokens"
    assert whole.usage is not None and whole.usage.output_tokens == 12
    text, types = "", []
    stream = await client.responses.create(
        model="demo", input="Hello, who are you?", max_output_tokens=12, temperature=0,
        stream=True,
    )  # fmt: skip
    async for event in stream:
        types.append(event.type)
        if event.type == "response.output_text.delta":
            text += event.delta
    assert text == whole.output_text and types[-1] == "response.incomplete"


async def test_json_schema_and_a_named_function(client: AsyncOpenAI) -> None:  # noqa: F811
    fmt: Any = {"type": "json_schema", "name": "city", "schema": CITY, "strict": True}
    answer = await client.responses.create(
        model="demo", input="Pick a city.", max_output_tokens=30, temperature=0,
        text={"format": fmt},
    )  # fmt: skip
    jsonschema.validate(json.loads(answer.output_text), CITY)
    tools: Any = [{"type": "function", "name": "weather", "parameters": CITY, "strict": True}]
    called = await client.responses.create(
        model="demo", input="Weather?", max_output_tokens=30, temperature=0, tools=tools,
        tool_choice={"type": "function", "name": "weather"},
    )  # fmt: skip
    calls = [item for item in called.output if item.type == "function_call"]
    assert len(calls) == 1 and calls[0].name == "weather" and calls[0].call_id
    jsonschema.validate(json.loads(calls[0].arguments), CITY)
