"""``InstrumentedLLM``: a model call's TTFT and usage recorded once each, with the stream as it
is, whether the inner model's own stream tells it (``AsyncBaseLLM.watched_stream``) or the
wrapper reads a stream it cannot see into (an inner model with its own ``astream``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from agents.llms.base import AsyncBaseLLM, LLMDelta, Messages, Usage
from agents.llms.scripted import ScriptedLLM
from app.ops.instrument import InstrumentedLLM

USER: Messages = [{"role": "user", "content": "hi"}]


class Metered:
    """A ``Metrics`` stand-in (``time_to_first_token`` and ``tokens``) that records calls."""

    def __init__(self) -> None:
        self.first: list[tuple[str, float, str]] = []
        self.counted: list[tuple[str, int, int, str]] = []

    def time_to_first_token(self, model: str, seconds: float, provider: str = "") -> None:
        self.first.append((model, seconds, provider))

    def tokens(self, model: str, prompt: int, completion: int, provider: str = "") -> None:
        self.counted.append((model, prompt, completion, provider))


class OwnStream(AsyncBaseLLM):
    """A model with its own ``astream`` (no stop words, no guards): the wrapper's path."""

    async def astream(self, messages: Messages, **kwargs: Any) -> AsyncIterator[LLMDelta]:
        yield LLMDelta(text="")
        yield LLMDelta(text="a ")
        yield LLMDelta(text="b")
        yield LLMDelta(finish_reason="stop", usage=Usage(3, 2))


async def test_an_agents_model_tells_its_first_text_and_usage_once() -> None:
    metered = Metered()
    inner = ScriptedLLM(["one two three"])
    llm = InstrumentedLLM(inner, "m", metered, "prov")  # type: ignore[arg-type]
    deltas = [d async for d in llm.astream(USER)]
    # The stream as the inner model's own: the words, then the end with the usage.
    assert [d.text for d in deltas] == ["one ", "two ", "three", ""]
    assert deltas[-1].finish_reason == "stop"
    assert deltas[-1].usage == Usage(prompt_tokens=1, completion_tokens=3)
    assert all(d.usage is None and d.finish_reason is None for d in deltas[:-1])
    assert [(m, p) for m, _, p in metered.first] == [("m", "prov")]
    assert 0 <= metered.first[0][1] < 5
    assert metered.counted == [("m", 1, 3, "prov")]


async def test_stop_words_cut_the_text_and_the_first_text_is_the_cut_ones() -> None:
    metered = Metered()
    llm = InstrumentedLLM(ScriptedLLM(["one two#three four"]), "m", metered)  # type: ignore[arg-type]
    deltas = [d async for d in llm.astream(USER, stop_words=["#"])]
    assert "".join(d.text for d in deltas) == "one two"
    assert deltas[-1].finish_reason == "stop"
    assert len(metered.first) == 1
    assert metered.counted == []  # the call stopped before the model reported its usage


async def test_a_model_with_its_own_stream_is_measured_by_the_wrapper() -> None:
    metered = Metered()
    llm = InstrumentedLLM(OwnStream(), "own", metered)  # type: ignore[arg-type]
    deltas = [d async for d in llm.astream(USER)]
    assert [d.text for d in deltas] == ["", "a ", "b", ""]
    assert len(metered.first) == 1
    assert metered.counted == [("own", 3, 2, "own")]


async def test_no_text_no_first_token_and_no_usage_no_tokens() -> None:
    metered = Metered()
    llm = InstrumentedLLM(ScriptedLLM([""]), "m", metered)  # type: ignore[arg-type]
    deltas = [d async for d in llm.astream(USER)]
    assert [d.text for d in deltas] == [""]
    assert metered.first == []
    assert metered.counted == [("m", 1, 0, "m")]
