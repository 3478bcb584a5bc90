"""Drives AgentStation with the OpenAI Agents SDK on the Responses API; run by
tests/clients/test_agents_sdk.py with ``.venv-agents-sdk/bin/python -I`` (the SDK imports as
``agents``, this project's library too, so it has a venv of its own). Prints one JSON line.

Modes (OPENAI_BASE_URL and OPENAI_API_KEY name the live server and a tenant's key):
  plain  Runner.run and Runner.run_streamed on the ``echo`` model
  chain  two runs on ``chain``, the second with the first's ``previous_response_id``,
         and a third without it
  tool   a function tool on ``weather``: the model calls it, the SDK runs it and sends its
         output back, the model answers; also with ``auto_previous_response_id``
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

from agents import (  # the OpenAI Agents SDK, not this project's package
    Agent,
    Runner,
    function_tool,
    set_default_openai_api,
    set_tracing_disabled,
)

set_default_openai_api("responses")
set_tracing_disabled(True)

TOOL_CALLS: list[str] = []


@function_tool
def get_weather(city: str) -> str:
    """The weather in a city."""
    TOOL_CALLS.append(city)
    return f"sunny, 21 C in {city}"


def items_of(result: Any) -> list[str]:
    return [item.type for item in result.new_items]


async def plain() -> dict[str, Any]:
    agent = Agent(name="echoer", instructions="Repeat the user.", model="echo")
    result = await Runner.run(agent, "Hello from the Agents SDK")
    streamed = Runner.run_streamed(agent, "Hello again, streamed")
    deltas = []
    async for event in streamed.stream_events():
        if event.type == "raw_response_event" and event.data.type == "response.output_text.delta":
            deltas.append(event.data.delta)
    return {
        "output": result.final_output,
        "response_id": result.last_response_id,
        "streamed_output": streamed.final_output,
        "streamed_deltas": deltas,
    }


async def chain() -> dict[str, Any]:
    agent = Agent(name="chainer", model="chain")
    first = await Runner.run(agent, "Tell me something.")
    second = await Runner.run(agent, "And then?", previous_response_id=first.last_response_id)
    fresh = await Runner.run(agent, "And then?")
    return {
        "first": first.final_output,
        "first_id": first.last_response_id,
        "second": second.final_output,
        "second_id": second.last_response_id,
        "without_previous": fresh.final_output,
    }


async def tool() -> dict[str, Any]:
    agent = Agent(name="forecaster", model="weather", tools=[get_weather])
    result = await Runner.run(agent, "What is the weather in Paris?")
    calls = list(TOOL_CALLS)
    chained = await Runner.run(
        agent, "What is the weather in Paris?", auto_previous_response_id=True
    )
    return {
        "output": result.final_output,
        "tool_calls": calls,
        "items": items_of(result),
        "response_id": result.last_response_id,
        "chained_output": chained.final_output,
        "chained_tool_calls": TOOL_CALLS[len(calls) :],
        "chained_items": items_of(chained),
    }


MODES = {"plain": plain, "chain": chain, "tool": tool}

if __name__ == "__main__":
    print(json.dumps(asyncio.run(MODES[sys.argv[1]]())))
