"""The demo model is reproducible and a real chat model (template, tools, eos)."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.demo_model import EOS_TOKEN, main

pytestmark = pytest.mark.vllm


def test_building_twice_gives_the_same_bytes(demo_model_path: Path, tmp_path: Path) -> None:
    assert main([str(tmp_path / "again")]) == 0
    names = sorted(p.name for p in demo_model_path.iterdir())
    assert "model.safetensors" in names and "tokenizer.json" in names
    for name in names:
        assert (tmp_path / "again" / name).read_bytes() == (demo_model_path / name).read_bytes()


def test_chat_template_renders_chatml_with_tools(demo_model_path: Path) -> None:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(demo_model_path))
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "", "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        ]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]  # fmt: skip
    text = tok.apply_chat_template(
        messages, tools=tools, tokenize=False, add_generation_prompt=True
    )
    assert '<tools>\n{"type": "function"' in text
    assert '<tool_call>\n{"name": "f", "arguments": {}}\n</tool_call><|im_end|>' in text
    assert "<tool_response>\n42\n</tool_response>" in text
    assert text.endswith("<|im_start|>assistant\n")
    assert tok.eos_token == EOS_TOKEN
