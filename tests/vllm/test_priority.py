"""The engine's options on the real engine: scheduling by session (``scheduling_policy:
priority``: a run's model call after a tool result goes ahead of new arrivals waiting for the
engine; requests of one priority keep their order) and compact forced tool calls (a default)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from agents.llms.vllm import AsyncVllmModel
from agents.llms.vllm_engine import CONTINUING_PRIORITY, VllmEngine, call_priority
from tests.vllm.conftest import ENGINE_ARGS

pytestmark = pytest.mark.vllm

NEW: Any = [{"role": "user", "content": "Hello, who are you?"}]
CALL = {"id": "call_1", "type": "function", "function": {"name": "ping", "arguments": "{}"}}
AFTER_TOOL: Any = [
    {"role": "user", "content": "Ping, please."},
    {"role": "assistant", "content": "", "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "pong"},
]


def test_only_a_call_after_a_tool_result_is_a_continuing_call() -> None:
    assert call_priority(AFTER_TOOL) == CONTINUING_PRIORITY < 0
    assert call_priority(AFTER_TOOL[:2]) == call_priority(NEW) == call_priority([]) == 0
    lagent_style = [*NEW, {"role": "environment", "content": "42"}]
    assert call_priority(lagent_style) == CONTINUING_PRIORITY


def test_a_configured_structured_outputs_config_is_merged_over_the_default() -> None:
    def resolved(config: Any) -> Any:
        args = {"structured_outputs_config": config}
        return VllmEngine("m", args).resolved_args()["structured_outputs_config"]

    assert VllmEngine("m").resolved_args()["structured_outputs_config"] == {
        "backend": "xgrammar", "disable_any_whitespace": True,
    }  # fmt: skip
    assert resolved({"backend": "guidance"}) == {
        "backend": "guidance", "disable_any_whitespace": True,
    }  # fmt: skip
    assert resolved({"backend": "outlines"}) == {"backend": "outlines"}  # vLLM refuses it there
    assert resolved({"disable_any_whitespace": False})["disable_any_whitespace"] is False
    assert not VllmEngine("m").by_priority  # fcfs unless configured
    assert VllmEngine("m", {"scheduling_policy": "priority"}).by_priority


@pytest.fixture(scope="module")
async def one_slot(demo_model_path: Path) -> AsyncIterator[AsyncVllmModel]:
    """An engine that runs one request at a time (the others wait in its queue), scheduling by
    session (``scheduling_policy: priority``, an option) and the product's structured outputs."""
    args = {k: v for k, v in ENGINE_ARGS.items() if k != "structured_outputs_config"}
    args = {**args, "max_num_seqs": 1, "scheduling_policy": "priority"}
    llm = AsyncVllmModel(str(demo_model_path), engine_args=args)
    await llm.start()
    yield llm
    await llm.close()


async def _order(llm: AsyncVllmModel, queued: list[tuple[str, Any]]) -> list[str]:
    """Which of ``queued`` the engine answers first, when they arrive (in this order) while
    a long generation holds its only slot and then stops."""
    engine = llm.engine
    started = asyncio.Event()
    order: list[str] = []

    async def blocker() -> None:
        params = {"max_new_tokens": 1500, "ignore_eos": True, "temperature": 0}
        async for _ in llm.astream(NEW, **params):
            started.set()

    async def call(name: str, messages: Any) -> None:
        async for _ in llm.astream(messages, max_new_tokens=2, temperature=0):
            if name not in order:
                order.append(name)

    holder = asyncio.create_task(blocker())
    await started.wait()
    calls = []
    for n, (name, messages) in enumerate(queued, start=2):
        calls.append(asyncio.create_task(call(name, messages)))
        for _ in range(6000):  # in the engine's queue before the next one comes
            if engine.running_requests() >= n:
                break
            await asyncio.sleep(0.01)
        else:
            raise AssertionError(f"{name!r} never reached the engine")
    assert order == []  # all waiting behind the running generation
    holder.cancel()  # aborts it in the engine: the slot frees
    await asyncio.gather(holder, return_exceptions=True)
    await asyncio.gather(*calls)
    return order


async def test_a_call_after_a_tool_result_goes_before_queued_new_arrivals(
    one_slot: AsyncVllmModel,
) -> None:
    assert one_slot.engine.by_priority  # the product's default (docs/engine.md)
    order = await _order(one_slot, [("new", NEW), ("after tool", AFTER_TOOL)])
    assert order == ["after tool", "new"]


async def test_requests_of_one_kind_are_served_in_arrival_order(
    one_slot: AsyncVllmModel,
) -> None:
    first = [{"role": "user", "content": "First."}]
    second = [{"role": "user", "content": "Second."}]
    assert await _order(one_slot, [("first", first), ("second", second)]) == ["first", "second"]
    later = [*AFTER_TOOL[:2], {**AFTER_TOOL[2], "content": "pong again"}]
    order = await _order(one_slot, [("tool 1", AFTER_TOOL), ("tool 2", later)])
    assert order == ["tool 1", "tool 2"]


async def test_a_forced_call_is_compact_json_by_default(one_slot: AsyncVllmModel) -> None:
    # The random model pads a forced call with whitespace until max_tokens unless the engine's
    # config forbids free whitespace (a request cannot): the default does.
    tool = {
        "type": "function",
        "function": {
            "name": "ping",
            "description": "Ping.",
            "parameters": {"type": "object", "properties": {}},
        },
    }
    force = {"type": "function", "function": {"name": "ping"}}
    calls: list[Any] = []
    params = {"tools": [tool], "tool_choice": force, "max_new_tokens": 40, "temperature": 0}
    async for delta in one_slot.astream(NEW, **params):
        calls += delta.extra.get("tool_calls") or []
    assert [c["function"]["arguments"] for c in calls] == ["{}"]
