"""Prompts tokenized by segment (agents/llms/prompt_tokens.py): the same ids as vLLM's own
rendering, for the demo model and the default model, and a conversation's next turn encodes
only what is new."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from transformers import AutoTokenizer

from agents.llms.prompt_tokens import SegmentTokenizer
from app.engines.vllm import VllmHandle

pytestmark = pytest.mark.vllm

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run a cell.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
]


def conversation(turns: int) -> list[dict[str, Any]]:
    """A system prompt, ``turns`` user/assistant pairs with a tool call and its result each,
    then a user message (text that stresses the tokenizer: spaces, accents, digits)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "Be terse.  \n"}]
    for k in range(turns):
        arguments = f'{{"code": "print({k} ** 2)"}}'
        function = {"name": "python", "arguments": arguments}
        call = {"id": f"call_{k}", "type": "function", "function": function}
        messages += [
            {"role": "user", "content": f"Question {k}: caf\u00e9 cafe\u0301  12{k}45?\n"},
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "tool_call_id": f"call_{k}", "content": f"{k * k}\n"},
            {"role": "assistant", "content": f" The answer is {k * k}. \u2014 done"},
        ]
    return [*messages, {"role": "user", "content": "And now?"}]


async def vllm_ids(handle: VllmHandle, messages: list[dict[str, Any]], **kw: Any) -> list[int]:
    """vLLM's own rendering (template and tokenizer in one), the reference."""
    from vllm.renderers.params import ChatParams

    kwargs = {"add_generation_prompt": True, **kw}
    params = ChatParams(chat_template_kwargs=kwargs)
    _, (prompt,) = await handle.llm.engine.llm.renderer.render_chat_async([messages], params)
    return list(prompt["prompt_token_ids"])


async def test_engine_prompts_equal_vllms_own_and_grow_by_the_new_segments(
    vllm_handle: VllmHandle,
) -> None:
    engine = vllm_handle.llm.engine
    segments = engine._segments
    assert segments is not None  # the demo model's tokenizer passes the probe
    for turns in (0, 1, 3, 6):
        messages = conversation(turns)
        got = await engine.render(messages, tools=TOOLS)
        assert got["prompt_token_ids"] == await vllm_ids(vllm_handle, messages, tools=TOOLS)
        plain = await engine.render(messages)
        assert plain["prompt_token_ids"] == await vllm_ids(vllm_handle, messages)

    # The next turn of a conversation encodes only its new segments: what is kept grows by
    # their ids, not by the whole history's.
    before = segments.kept_tokens
    longer = conversation(7)
    ids = (await engine.render(longer, tools=TOOLS))["prompt_token_ids"]
    assert 0 < segments.kept_tokens - before < len(ids) // 4


async def test_the_model_answers_the_same_from_segment_ids(vllm_handle: VllmHandle) -> None:
    llm = vllm_handle.llm
    messages = conversation(2)
    first = await llm.chat(messages, max_new_tokens=12)
    llm.engine._segments.clear()  # type: ignore[union-attr]
    assert await llm.chat(messages, max_new_tokens=12) == first


@pytest.mark.parametrize("model", ["demo", "default"])
def test_segments_add_up_for_the_shipped_tokenizers(
    model: str, demo_model_path: Path, default_model_path: Path
) -> None:
    path = demo_model_path if model == "demo" else default_model_path
    tokenizer = AutoTokenizer.from_pretrained(path)
    segments = SegmentTokenizer.for_tokenizer(tokenizer)
    assert segments is not None
    for turns in (0, 2, 5):
        text = tokenizer.apply_chat_template(
            conversation(turns), tools=TOOLS, add_generation_prompt=True, tokenize=False
        )
        assert segments.encode(text) == tokenizer(text, add_special_tokens=False)["input_ids"]


def test_kept_segments_are_bounded(demo_model_path: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(demo_model_path)
    segments = SegmentTokenizer.for_tokenizer(tokenizer)
    assert segments is not None
    segments.max_tokens = 200
    special = next(iter(tokenizer.added_tokens_decoder.values())).content
    for k in range(50):
        text = f"message number {k} with a few words{special}reply {k}{special}"
        assert segments.encode(text) == tokenizer(text, add_special_tokens=False)["input_ids"]
        assert segments.kept_tokens <= 200


def test_a_tokenizer_whose_added_tokens_strip_is_tokenized_whole(demo_model_path: Path) -> None:
    from tokenizers import AddedToken

    tokenizer = AutoTokenizer.from_pretrained(demo_model_path)
    assert SegmentTokenizer.for_tokenizer(tokenizer) is not None
    tokenizer.add_tokens([AddedToken("<|eats_spaces|>", rstrip=True, special=True)])
    assert SegmentTokenizer.for_tokenizer(tokenizer) is None
