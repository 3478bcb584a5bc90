"""Build the small offline chat model: a locally trained tokenizer and random seeded weights.

The model talks nonsense (its weights are random) but it is a real Qwen2 checkpoint with a
ChatML chat template (tools included), so vLLM serves it like any other chat model. It is
what ``make run`` falls back to and what the real-engine tests load. Building it needs no
network and gives the same bytes every time on the same Python and library versions.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import sysconfig
from collections.abc import Iterator, Sequence
from pathlib import Path

logger = logging.getLogger(__name__)

VOCAB_SIZE = 2048
SEED = 0
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# Added but not special (as in Qwen2.5): they stay in decoded text for the tool-call parser.
TOOL_TOKENS = ["<tool_call>", "</tool_call>"]
EOS_TOKEN = "<|im_end|>"
# Stdlib modules whose source trains the tokenizer: a fixed list, so the vocabulary is stable.
CORPUS_MODULES = [
    "argparse.py", "asyncio/tasks.py", "collections/__init__.py", "contextlib.py",
    "dataclasses.py", "email/message.py", "functools.py", "http/client.py", "json/decoder.py",
    "json/encoder.py", "logging/__init__.py", "pathlib.py", "random.py", "statistics.py",
    "string.py", "textwrap.py", "this.py", "typing.py", "unittest/case.py", "urllib/parse.py",
]  # fmt: skip

# ChatML with Qwen2.5-style (Hermes) tool calls: vLLM's "hermes" tool-call parser reads them.
CHAT_TEMPLATE = """\
{%- if tools %}
{{- '<|im_start|>system\\n' }}
{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}
{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n' }}
{{- 'You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}
{%- for tool in tools %}{{- '\\n' + (tool | tojson) }}{%- endfor %}
{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and '
    'arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\"name\": '
    '<function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}
{%- elif messages[0].role == 'system' %}
{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
{%- endif %}
{%- for message in messages %}
{%- if message.role == 'system' and loop.first %}
{%- elif message.role == 'assistant' %}
{{- '<|im_start|>assistant' }}
{%- if message.content %}{{- '\\n' + message.content }}{%- endif %}
{%- for tool_call in message.tool_calls or [] %}
{%- set fn = tool_call.function if tool_call.function is defined else tool_call %}
{{- '\\n<tool_call>\\n{\"name\": \"' + fn.name + '\", \"arguments\": ' }}
{%- if fn.arguments is string %}{{- fn.arguments }}
{%- else %}{{- fn.arguments | tojson }}{%- endif %}
{{- '}\\n</tool_call>' }}
{%- endfor %}
{{- '<|im_end|>\\n' }}
{%- elif message.role == 'tool' %}
{{- '<|im_start|>user\\n<tool_response>\\n' + message.content }}
{{- '\\n</tool_response><|im_end|>\\n' }}
{%- else %}
{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}
{%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}
"""


def _corpus() -> Iterator[str]:
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in CORPUS_MODULES:
        path = stdlib / name
        if path.is_file():
            yield path.read_text(encoding="utf-8")


def build_tokenizer(path: Path) -> int:
    """Train the byte-level BPE tokenizer, save it with the chat template; returns its size."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE - len(TOOL_TOKENS),
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_corpus(), trainer=trainer)
    tok.add_tokens([AddedToken(t, special=False, normalized=False) for t in TOOL_TOKENS])
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token=EOS_TOKEN,
        pad_token="<|endoftext|>",
        additional_special_tokens=SPECIAL_TOKENS[1:],
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
    )
    fast.save_pretrained(str(path))
    return int(tok.get_vocab_size())


def build_weights(path: Path, vocab_size: int, eos_id: int, pad_id: int) -> None:
    """Save a random-weight Qwen2 model (seeded) whose head size vLLM's CPU attention supports."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(
        vocab_size=vocab_size,
        hidden_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,  # head size 64
        num_key_value_heads=2,
        intermediate_size=512,
        max_position_embeddings=4096,
        # Untied and a wide init: otherwise greedy output is one token repeated.
        tie_word_embeddings=False,
        initializer_range=0.2,
        bos_token_id=eos_id,
        eos_token_id=eos_id,
        pad_token_id=pad_id,
    )
    torch.manual_seed(SEED)
    model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.config.dtype = torch.bfloat16
    model.generation_config = GenerationConfig(
        bos_token_id=eos_id, eos_token_id=eos_id, pad_token_id=pad_id
    )
    model.save_pretrained(str(path))


def build_demo_model(path: str | Path) -> Path:
    """Build the demo model into ``path`` (created if missing) and return the path."""
    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    vocab_size = build_tokenizer(out)
    vocab = json.loads((out / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    build_weights(out, vocab_size, eos_id=vocab[EOS_TOKEN], pad_id=vocab["<|endoftext|>"])
    logger.info("demo model written to %s (random weights: its output is random text)", out)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: ``agentstation demo-model PATH``."""
    parser = argparse.ArgumentParser(
        prog="agentstation demo-model", description="Build the small offline demo chat model."
    )
    parser.add_argument("path", help="directory to write the model into")
    args = parser.parse_args(argv)
    out = build_demo_model(args.path)
    print(f"demo model written to {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
