"""ScriptedLLM semantics and the meta-template renderer."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from typing import Any

import pytest

from agents.llms import (
    INTERNLM2_META,
    ScriptedLLM,
    ScriptExhaustedError,
    SyncScriptedLLM,
    Usage,
    render_meta_template,
    usage_scope,
)
from agents.llms.scripted import split_words
from agents.llms.templates import to_api_messages

USER = [{"role": "user", "content": "hello there"}]


async def test_replays_in_order_streamed_word_by_word() -> None:
    llm = ScriptedLLM(["first reply  here\n", "second"])
    pieces = [text async for text in llm.stream_chat(USER)]
    assert pieces == ["first ", "reply  ", "here\n"]
    assert await llm.chat(USER) == "second"
    assert split_words("  lead  ws") == ["  ", "lead  ", "ws"]


async def test_records_calls_and_per_call_kwargs_do_not_stick() -> None:
    llm = ScriptedLLM(["a", "b"], temperature=0.1)
    await llm.chat(USER, temperature=0.9, stop_words=["x"])
    await llm.chat(USER)
    first, second = llm.calls
    assert first["messages"] == USER
    assert first["params"]["temperature"] == 0.9 and first["params"]["stop_words"] == ["x"]
    assert second["params"]["temperature"] == 0.1 and second["params"]["stop_words"] == []
    assert llm.gen_params["temperature"] == 0.1


async def test_past_the_script_fails_loudly_unless_cycling() -> None:
    llm = ScriptedLLM(["only"])
    await llm.chat(USER)
    with pytest.raises(ScriptExhaustedError, match="call #2 but has only 1 replies"):
        await llm.chat(USER)
    cycling = ScriptedLLM(["a", "b"], cycle=True)
    assert [await cycling.chat(USER) for _ in range(3)] == ["a", "b", "a"]


async def test_scripted_exceptions_are_raised() -> None:
    llm = ScriptedLLM([ConnectionError("engine down"), "ok"])
    with pytest.raises(ConnectionError, match="engine down"):
        await llm.chat(USER)
    assert await llm.chat(USER) == "ok"


async def test_echo_mode_and_usage() -> None:
    llm = ScriptedLLM(None)
    messages = [{"role": "system", "content": "be brief"}, *USER]
    with usage_scope() as counter:
        deltas = [d async for d in llm.astream(messages)]
    assert "".join(d.text for d in deltas) == "hello there"
    assert deltas[-1].finish_reason == "stop"
    assert deltas[-1].usage == Usage(prompt_tokens=4, completion_tokens=2)
    assert counter == Usage(prompt_tokens=4, completion_tokens=2)


async def test_stop_words_cut_the_reply() -> None:
    llm = ScriptedLLM(["think <|action_end|> ignored", "a b STOP c"], stop_words=["STOP"])
    assert await llm.chat(USER, stop_words=["<|action_end|>"]) == "think "
    assert await llm.chat(USER) == "a b "


async def test_chunk_delay_allows_cancellation() -> None:
    llm = ScriptedLLM(["one two three four"], chunk_delay_s=0.05)
    seen: list[str] = []
    first = asyncio.Event()

    async def consume() -> None:
        async for text in llm.stream_chat(USER):
            seen.append(text)
            first.set()

    task = asyncio.create_task(consume())
    await first.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert seen == ["one "]


def test_sync_twin() -> None:
    llm = SyncScriptedLLM(["sync reply", "streamed reply"])
    assert llm.chat(USER) == "sync reply"
    assert list(llm.stream_chat(USER)) == ["streamed ", "reply"]
    with pytest.raises(ScriptExhaustedError):
        llm.chat(USER)


def test_internlm2_meta_template() -> None:
    messages = [
        {"role": "system", "content": "You are helpful."},
        {"role": "system", "content": "tools", "name": "plugin"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "call"},
        {"role": "environment", "content": "42", "name": "interpreter"},
    ]
    assert render_meta_template(messages, INTERNLM2_META) == (
        "<|im_start|>system\nYou are helpful.<|im_end|>\n"
        "<|im_start|>system name=<|plugin|>\ntools<|im_end|>\n"
        "<|im_start|>user\nhi<|im_end|>\n"
        "<|im_start|>assistant\ncall<|im_end|>\n"
        "<|im_start|>environment name=<|interpreter|>\n42<|im_end|>\n"
        "<|im_start|>assistant\n"
    )


def test_meta_template_generate_fallback_and_errors() -> None:
    meta: list[dict[str, Any]] = [
        {"role": "user", "begin": "U:", "end": "\n"},
        {"role": "assistant", "begin": "A:", "end": "\n", "generate": True},
        {"role": "tool", "fallback_role": "user"},
    ]
    assert render_meta_template([{"role": "tool", "content": "x"}], meta) == "U:x\nA:"
    partial = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "par"}]
    assert render_meta_template(partial, meta) == "U:q\nA:par"
    assert render_meta_template(partial, None) == "q\npar"
    with pytest.raises(ValueError, match="role 'robot' is not in the meta template"):
        render_meta_template([{"role": "robot", "content": "x"}], meta)


def test_api_roles() -> None:
    messages = [
        {"role": "environment", "content": "result", "name": "plugin"},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
    ]
    assert to_api_messages(messages) == [
        {"role": "system", "content": "result"},
        {"role": "tool", "content": "r", "tool_call_id": "c1"},
    ]


def test_importing_agents_llms_never_imports_vllm() -> None:
    code = (
        "import sys, agents.llms as m; assert 'vllm' not in sys.modules; "
        "assert 'VllmModel' in m.__all__ and 'agents.llms.vllm' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_per_call_params_never_change_the_models_own() -> None:
    llm = ScriptedLLM(["x"], stop_words=["<end>"], temperature=0.2)
    params = llm.update_gen_params(temperature=0.9, top_p=None)
    params["stop_words"].append("<other>")
    assert params["temperature"] == 0.9 and params["top_p"] == llm.gen_params["top_p"]
    assert llm.gen_params["stop_words"] == ["<end>"] and llm.gen_params["temperature"] == 0.2
    assert llm.update_gen_params(stop_words="<s>")["stop_words"] == ["<s>"]
