"""The agent-facing ``AsyncVllmModel`` on the real engine."""

from __future__ import annotations

import asyncio
import os
import signal
import time

import pytest

from agents.llms.base import usage_scope
from agents.llms.vllm import AsyncVllmModel, VllmEngineError, get_engine
from app.engines.base import EngineError
from app.engines.vllm import VllmHandle
from tests.vllm.conftest import engine_core_pids

pytestmark = pytest.mark.vllm

HELLO = [{"role": "user", "content": "Hello, who are you?"}]


async def test_greedy_is_deterministic_alone_and_in_a_batch(vllm_handle: VllmHandle) -> None:
    llm = vllm_handle.llm
    alone = await llm.chat(HELLO)
    others = [llm.chat([{"role": "user", "content": f"other prompt {i}"}]) for i in range(3)]
    batched, *_ = await asyncio.gather(llm.chat(HELLO), *others)
    assert alone
    assert batched == alone == await llm.chat(HELLO)


async def test_stream_text_equals_chat_text_and_usage_is_exact(vllm_handle: VllmHandle) -> None:
    llm = vllm_handle.llm
    with usage_scope() as usage:
        deltas = [d async for d in llm.astream(HELLO, max_new_tokens=20)]
    assert len([d for d in deltas if d.text]) > 1  # token-level streaming
    assert "".join(d.text for d in deltas) == await llm.chat(HELLO, max_new_tokens=20)
    last = deltas[-1]
    assert last.finish_reason == "length" and last.usage is not None
    tok = llm.engine.tokenizer()
    text = tok.apply_chat_template(HELLO, add_generation_prompt=True, tokenize=False)
    prompt = tok.encode(text, add_special_tokens=False)
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (len(prompt), 20)
    assert (usage.prompt_tokens, usage.completion_tokens) == (len(prompt), 20)


async def test_seeded_sampling_reproduces(vllm_handle: VllmHandle) -> None:
    llm = vllm_handle.llm
    first = await llm.chat(HELLO, temperature=1.0, top_p=1.0, seed=11)
    assert first == await llm.chat(HELLO, temperature=1.0, top_p=1.0, seed=11)
    assert first != await llm.chat(HELLO, temperature=1.0, top_p=1.0, seed=12)


async def test_stop_words_end_the_reply(vllm_handle: VllmHandle) -> None:
    llm = vllm_handle.llm
    full = await llm.chat(HELLO, max_new_tokens=30)
    word = full[len(full) // 2 : len(full) // 2 + 2]
    cut = await llm.chat(HELLO, max_new_tokens=30, stop_words=[word])
    assert cut == full[: full.index(word)]


async def test_eight_concurrent_requests_batch(vllm_handle: VllmHandle) -> None:
    """Eight requests at once run in the same engine steps: every one has its first token
    before any of them has finished (served one after another, the second's first token
    would come after the first's last). Order, not timing: a loaded machine cannot flip it."""
    llm = vllm_handle.llm
    params = {"max_new_tokens": 96, "ignore_eos": True, "temperature": 0}

    async def one(i: int) -> tuple[float, float, int]:
        first, tokens = 0.0, 0
        async for delta in llm.astream([{"role": "user", "content": f"q{i}"}], **params):
            if delta.text:
                first = first or time.perf_counter()
                tokens += 1
        return first, time.perf_counter(), tokens

    await llm.chat(HELLO, max_new_tokens=2)  # warm
    got = await asyncio.gather(*(one(i) for i in range(8)))
    assert all(first and tokens > 1 for first, _, tokens in got), got
    last_first = max(first for first, _, _ in got)
    first_end = min(end for _, end, _ in got)
    assert last_first < first_end, f"a request started after another finished: {got}"


async def _wait_idle(handle: VllmHandle) -> None:
    for _ in range(100):
        if handle.running_requests() == 0:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"{handle.running_requests()} requests still running")


async def test_closing_the_stream_aborts_the_generation(vllm_handle: VllmHandle) -> None:
    stream = vllm_handle.llm.astream(HELLO, max_new_tokens=1500, ignore_eos=True)
    async for delta in stream:
        if delta.text:
            break
    assert vllm_handle.running_requests() == 1
    await stream.aclose()  # type: ignore[attr-defined]
    assert vllm_handle.running_requests() == 0


async def test_cancelling_the_task_aborts_the_generation(vllm_handle: VllmHandle) -> None:
    started = asyncio.Event()

    async def consume() -> None:
        async for _ in vllm_handle.llm.astream(HELLO, max_new_tokens=1500, ignore_eos=True):
            started.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(started.wait(), 30)
    assert vllm_handle.running_requests() == 1
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_idle(vllm_handle)


async def test_models_with_one_config_share_one_engine(vllm_handle: VllmHandle) -> None:
    llm = vllm_handle.llm
    twin = AsyncVllmModel(llm.engine.path, engine_args=llm.engine.engine_args, temperature=0)
    assert twin.engine is llm.engine and twin.ready
    assert await twin.chat(HELLO, max_new_tokens=32) == await llm.chat(HELLO)
    assert llm.engine.users == 2
    await twin.close()  # the other user keeps the engine running
    assert llm.engine.users == 1 and vllm_handle.ready


async def test_a_model_that_cannot_load_fails_with_the_reason(tmp_path: object) -> None:
    engine = get_engine(f"{tmp_path}/no-such-model", {"dtype": "bfloat16"})
    with pytest.raises(VllmEngineError, match="no-such-model"):
        await engine.start()
    assert not engine.ready and engine.error
    with pytest.raises(VllmEngineError, match="failed to start"):
        await AsyncVllmModel(engine.path, engine_args={"dtype": "bfloat16"}).chat(HELLO)


async def test_a_dead_engine_fails_requests_then_comes_back(
    vllm_handle: VllmHandle, vllm_cores: dict[str, set[int]]
) -> None:
    llm = vllm_handle.llm
    before = await llm.chat(HELLO)
    # The handle's own core (another test's engine may still be exiting beside it).
    (pid,) = vllm_cores["demo"]
    assert pid in engine_core_pids()
    os.kill(pid, signal.SIGKILL)
    for _ in range(200):
        if not vllm_handle.ready:
            break
        await asyncio.sleep(0.05)
    assert not vllm_handle.ready
    with pytest.raises(VllmEngineError, match="died"):
        await llm.chat(HELLO)
    with pytest.raises(EngineError) as err:
        await vllm_handle.raw.complete({"model": "demo", "messages": HELLO, "max_tokens": 4})
    assert err.value.status == 503
    for _ in range(3000):  # the replacement loads in the background
        if vllm_handle.ready:
            break
        await asyncio.sleep(0.1)
    assert vllm_handle.ready and await llm.chat(HELLO) == before
