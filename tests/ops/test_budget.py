"""Token budgets: a run stops at the model call after its budget is spent; refusals up front."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from agents.llms.base import AsyncBaseLLM, LLMDelta, Messages, Usage, usage_scope
from app.ops.budget import (
    BudgetExceeded,
    RunBudget,
    budget_scope,
    check_current_budget,
    session_token_budget,
)


class CountingLLM(AsyncBaseLLM):
    """Replies "ok" and reports 10 prompt + 5 completion tokens per call."""

    def __init__(self) -> None:
        super().__init__(temperature=0.0, stop_words=["<stop>"])
        self.calls = 0

    async def _astream(self, messages: Messages, **params: Any) -> AsyncIterator[LLMDelta]:
        self.calls += 1
        yield LLMDelta(text="ok")
        yield LLMDelta(finish_reason="stop", usage=Usage(prompt_tokens=10, completion_tokens=5))


@pytest.mark.parametrize(
    ("spec", "limit"),
    [
        ({}, None),
        ({"budget": None}, None),
        ({"budget": {}}, None),
        ({"budget": {"max_total_tokens": 100}}, 100),
    ],
)
def test_session_budget_comes_from_the_spec(spec: dict[str, Any], limit: int | None) -> None:
    assert session_token_budget(spec) == limit


@pytest.mark.parametrize("bad", [0, -5, "100", 1.5, True])
def test_session_budget_must_be_a_positive_integer(bad: object) -> None:
    with pytest.raises(ValueError, match="max_total_tokens"):
        session_token_budget({"budget": {"max_total_tokens": bad}})


def test_preflight_refuses_a_run_when_a_budget_is_already_spent() -> None:
    RunBudget.build(Usage(), session_limit=100, session_used=99).preflight()
    with pytest.raises(BudgetExceeded) as info:
        RunBudget.build(
            Usage(), session_limit=100, session_used=40, tenant_limit=50, tenant_used=50
        ).preflight()
    assert (info.value.scope, info.value.limit, info.value.used) == ("tenant", 50, 50)
    envelope = info.value.envelope()["error"]
    assert envelope["code"] == "budget_exceeded"
    assert envelope["param"] is None
    assert "tenant token budget exhausted: used 50 of 50 tokens" == envelope["message"]


async def test_a_run_stops_at_the_first_model_call_after_the_budget_is_crossed() -> None:
    inner = CountingLLM()
    llm = inner  # the model itself checks the budget: no wrapper
    replies: list[str] = []
    with (
        usage_scope() as usage,
        budget_scope(RunBudget.build(usage, session_limit=40, session_used=10)),
    ):
        with pytest.raises(BudgetExceeded) as info:
            for _ in range(5):
                replies.append(await llm.chat([{"role": "user", "content": "hi"}]))
    # 10 before + 15 + 15 = 40 >= 40 after two calls: the third never reaches the model.
    assert replies == ["ok", "ok"]
    assert inner.calls == 2
    assert usage.total_tokens == 30
    assert (info.value.scope, info.value.used) == ("session", 40)


async def test_without_a_budget_scope_the_wrapper_is_transparent() -> None:
    inner = CountingLLM()
    llm = inner  # budgets are checked by the model call itself: nothing wraps it
    check_current_budget()  # no budget bound: no-op
    pieces = [piece async for piece in llm.stream_chat([{"role": "user", "content": "x"}])]
    assert pieces == ["ok"] and inner.calls == 1
    # The wrapped model's parameters are the inner model's own objects.
    assert llm.gen_params is inner.gen_params
    assert llm.update_gen_params(temperature=0.5)["temperature"] == 0.5
    assert llm.gen_params["temperature"] == 0.0
    assert llm.gen_params["stop_words"] == ["<stop>"]
