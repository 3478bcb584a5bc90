"""A model without a chat template in its tokenizer renders lagent's ``meta_template``."""

from __future__ import annotations

from typing import Any

import pytest

from agents.llms.templates import render_meta_template
from app.engines.vllm import VllmHandle

pytestmark = pytest.mark.vllm
META: list[dict[str, Any]] = [
    {"role": "user", "begin": "USER: ", "end": "\n"},
    {"role": "assistant", "begin": "BOT: ", "end": "\n", "generate": True},
]


async def test_meta_template_fallback_renders_the_prompt(vllm_handle: VllmHandle) -> None:
    engine = vllm_handle.llm.engine
    messages = [{"role": "user", "content": "hi"}]
    tokenizer = engine.tokenizer()
    template, tokenizer.chat_template = tokenizer.chat_template, None
    try:
        prompt = await engine.render(messages, meta_template=META)
    finally:
        tokenizer.chat_template = template
    text = render_meta_template(messages, META)
    assert prompt["prompt_token_ids"] == tokenizer.encode(text)
    chat = await engine.render(messages, meta_template=META)
    assert chat["prompt_token_ids"] != prompt["prompt_token_ids"]  # the tokenizer's wins
