"""OpenAI chat completions on the real engine (the raw-model backend)."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import jsonschema
import pytest

from app.engines.base import EngineError
from app.engines.vllm import VllmHandle

pytestmark = pytest.mark.vllm

MESSAGES = [{"role": "user", "content": "Tell me about Paris."}]
PERSON: dict[str, Any] = {
    "type": "object",
    "properties": {
        "name": {"type": "string", "maxLength": 12},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
        "city": {"enum": ["Paris", "Rome", "Oslo"]},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
WEATHER: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "maxLength": 16},
                "unit": {"enum": ["C", "F"]},
            },
            "required": ["city", "unit"],
            "additionalProperties": False,
        },
    },
}
CLOCK: dict[str, Any] = {
    "type": "function",
    "function": {"name": "get_time", "parameters": {"type": "object"}},
}


def request(**kw: Any) -> dict[str, Any]:
    return {"model": "demo", "messages": MESSAGES, "max_tokens": 16, "temperature": 0, **kw}


async def collect(handle: VllmHandle, body: dict[str, Any]) -> list[dict[str, Any]]:
    return [chunk async for chunk in handle.raw.stream(body)]


async def test_completion_shape_usage_and_finish_reason(vllm_handle: VllmHandle) -> None:
    out = await vllm_handle.raw.complete(request())
    assert out["object"] == "chat.completion" and out["model"] == "demo"
    (choice,) = out["choices"]
    assert choice["finish_reason"] == "length" and choice["message"]["role"] == "assistant"
    assert out["usage"]["completion_tokens"] == 16
    assert out["usage"]["total_tokens"] == out["usage"]["prompt_tokens"] + 16


async def test_stream_equals_completion(vllm_handle: VllmHandle) -> None:
    whole = await vllm_handle.raw.complete(request(max_completion_tokens=24, max_tokens=None))
    chunks = await collect(
        vllm_handle,
        request(stream=True, max_completion_tokens=24, stream_options={"include_usage": True}),
    )
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"] == whole["usage"]
    assert all(c["usage"] is None for c in chunks[:-1])


async def test_n_choices_with_seed_and_logprobs(vllm_handle: VllmHandle) -> None:
    body = request(n=2, temperature=1.0, seed=5, logprobs=True, top_logprobs=2)
    out = await vllm_handle.raw.complete(body)
    assert [c["index"] for c in out["choices"]] == [0, 1]
    assert out["usage"]["completion_tokens"] == 32
    for choice in out["choices"]:
        content = choice["logprobs"]["content"]
        assert len(content) == 16
        assert all(len(entry["top_logprobs"]) == 2 and entry["logprob"] <= 0 for entry in content)
    texts = [c["message"]["content"] for c in out["choices"]]
    again = await vllm_handle.raw.complete(body)
    assert [c["message"]["content"] for c in again["choices"]] == texts


async def test_stop_sequences(vllm_handle: VllmHandle) -> None:
    full = (await vllm_handle.raw.complete(request(max_tokens=30)))["choices"][0]["message"]
    stop = full["content"][10:13]
    out = await vllm_handle.raw.complete(request(max_tokens=30, stop=[stop]))
    assert out["choices"][0]["message"]["content"] == full["content"][: full["content"].index(stop)]
    assert out["choices"][0]["finish_reason"] == "stop"


async def test_json_schema_output_validates(vllm_handle: VllmHandle) -> None:
    fmt = {"type": "json_schema", "json_schema": {"name": "person", "schema": PERSON}}
    out = await vllm_handle.raw.complete(request(max_tokens=120, response_format=fmt))
    assert out["choices"][0]["finish_reason"] == "stop"
    jsonschema.validate(json.loads(out["choices"][0]["message"]["content"]), PERSON)


async def test_json_object_output_parses(vllm_handle: VllmHandle) -> None:
    fmt = {"type": "json_object"}
    out = await vllm_handle.raw.complete(request(max_tokens=60, response_format=fmt))
    if out["choices"][0]["finish_reason"] == "stop":
        assert isinstance(json.loads(out["choices"][0]["message"]["content"]), dict)
    else:  # random weights may ramble past max_tokens: it is still the start of an object
        assert out["choices"][0]["message"]["content"].startswith("{")


async def test_named_tool_choice_returns_schema_valid_arguments(vllm_handle: VllmHandle) -> None:
    choice = {"type": "function", "function": {"name": "get_weather"}}
    body = request(max_tokens=60, tools=[WEATHER, CLOCK], tool_choice=choice)
    out = await vllm_handle.raw.complete(body)
    (call,) = out["choices"][0]["message"]["tool_calls"]
    assert call["type"] == "function" and call["id"].startswith("call_")
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(
        json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"]
    )
    assert out["choices"][0]["finish_reason"] == "stop"

    chunks = await collect(vllm_handle, {**body, "stream": True})
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]
        for c in chunks
        if c["choices"][0]["delta"].get("tool_calls")
    ]
    assert calls[0]["id"] and calls[0]["type"] == "function"
    assert calls[0]["function"]["name"] == "get_weather"
    assert all("id" not in c and "name" not in c["function"] for c in calls[1:])
    assert "".join(c["function"]["arguments"] for c in calls) == call["function"]["arguments"]


async def test_required_tool_choice_returns_valid_calls(vllm_handle: VllmHandle) -> None:
    body = request(
        max_tokens=80, tools=[WEATHER], tool_choice="required", parallel_tool_calls=False
    )
    out = await vllm_handle.raw.complete(body)
    assert out["choices"][0]["finish_reason"] == "tool_calls"
    (call,) = out["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "get_weather"
    jsonschema.validate(
        json.loads(call["function"]["arguments"]), WEATHER["function"]["parameters"]
    )
    chunks = await collect(vllm_handle, {**body, "stream": True})
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"


async def test_abort_mid_stream_frees_the_engine(vllm_handle: VllmHandle) -> None:
    stream = vllm_handle.raw.stream(request(max_tokens=1500, ignore_eos=True, stream=True))
    async for chunk in stream:
        if chunk["choices"][0]["delta"].get("content"):
            break
    assert vllm_handle.running_requests() == 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert vllm_handle.running_requests() == 0


async def test_bad_requests_are_400_naming_the_problem(vllm_handle: VllmHandle) -> None:
    with pytest.raises(EngineError) as err:
        await vllm_handle.raw.complete(request(n=2))  # greedy with n > 1
    assert err.value.status == 400 and "greedy" in err.value.message
    with pytest.raises(EngineError) as err:
        await vllm_handle.raw.complete(request(max_tokens=10**6))
    assert err.value.status == 400 and err.value.code == "context_length_exceeded"
    assert err.value.param == "messages"
    # A prompt over the context alone (vLLM's renderer refuses it first): the same code and
    # param, which LangChain reads as ContextOverflowError.
    long_prompt = [{"role": "user", "content": "word " * 5000}]
    with pytest.raises(EngineError) as err:
        await vllm_handle.raw.complete({**request(), "messages": long_prompt})
    assert err.value.status == 400 and err.value.code == "context_length_exceeded", err.value
    assert err.value.param == "messages" and "context length" in err.value.message
    bad_choice = {"type": "function", "function": {"name": "nope"}}
    with pytest.raises(EngineError) as err:
        await vllm_handle.raw.complete(request(tools=[WEATHER], tool_choice=bad_choice))
    assert err.value.status == 400


async def test_generation_config_defaults_are_read_once_per_engine(
    vllm_handle: VllmHandle, monkeypatch: pytest.MonkeyPatch
) -> None:
    # vLLM's server reads generation_config.json once; per request it cost 12% of the
    # gateway's CPU at 32 streams (bench engine + py-spy).
    backend = vllm_handle.raw
    llm = backend.engine._live()
    expected = llm.model_config.get_diff_sampling_param()
    await backend.complete({"model": "demo", "messages": MESSAGES, "max_tokens": 2})
    reads: list[int] = []
    original = type(llm.model_config).get_diff_sampling_param

    def counted(config: Any) -> dict[str, Any]:
        reads.append(1)
        return dict(original(config))

    monkeypatch.setattr(type(llm.model_config), "get_diff_sampling_param", counted)
    for _ in range(3):
        answer = await backend.complete({"model": "demo", "messages": MESSAGES, "max_tokens": 2})
        assert answer["usage"]["completion_tokens"] >= 1
    assert reads == []
    assert backend.sampling_defaults(llm) == expected
    restarted = SimpleNamespace(model_config=llm.model_config)  # a replaced engine: read anew
    assert backend.sampling_defaults(restarted) == expected
    assert reads == [1]


async def test_forced_calls_holding_a_control_character_are_calls_with_strict_arguments(
    vllm_handle: VllmHandle,
) -> None:
    # The root cause of test_required_tool_choice_returns_valid_calls failing where the demo
    # model's numerics differ: the JSON grammar lets a string hold a raw control character
    # (here forced by the pattern), and a "required" call was read as content, "stop".
    tab: dict[str, Any] = {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "pattern": "^x\ty$"}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }
    named = {"type": "function", "function": {"name": "f"}}
    for choice, finish in (("required", "tool_calls"), (named, "stop")):
        body = request(max_tokens=40, tools=[tab], tool_choice=choice, parallel_tool_calls=False)
        out = await vllm_handle.raw.complete(body)
        assert out["choices"][0]["finish_reason"] == finish, out
        (call,) = out["choices"][0]["message"]["tool_calls"]
        assert json.loads(call["function"]["arguments"]) == {"city": "x\ty"}  # strict JSON
        chunks = await collect(vllm_handle, {**body, "stream": True})
        streamed = "".join(
            c["function"]["arguments"]
            for chunk in chunks
            for c in chunk["choices"][0]["delta"].get("tool_calls") or []
        )
        assert json.loads(streamed) == {"city": "x\ty"}
        assert chunks[-1]["choices"][0]["finish_reason"] == finish
