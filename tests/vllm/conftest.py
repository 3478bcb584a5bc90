"""One real vLLM engine on the demo model for the whole session (bf16, eager, seed 0)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from app.demo_model import build_demo_model
from app.engines.vllm import VllmHandle, create_handle

# Pinned: outputs differ between eager and compiled and between bf16 and fp32.
ENGINE_ARGS = {
    "dtype": "bfloat16",
    "enforce_eager": True,
    "seed": 0,
    "max_model_len": 2048,
    "max_num_seqs": 32,
    # Random weights print whitespace forever inside JSON; compact JSON keeps answers short.
    "structured_outputs_config": {"backend": "xgrammar", "disable_any_whitespace": True},
}


@pytest.fixture(scope="session")
def demo_model_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo model, built once per session."""
    return build_demo_model(tmp_path_factory.mktemp("demo-model"))


def engine_core_pids() -> set[int]:
    """vLLM's engine-core child processes of this test process (comm is cut at 15 chars)."""
    me, pids = str(os.getpid()), set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if fields[1] == me and "EngineCor" in (stat.parent / "comm").read_text():
                pids.add(int(stat.parent.name))
    return pids


@pytest.fixture(scope="session")
def vllm_cores() -> dict[str, set[int]]:
    """The engine-core processes each session-wide handle started (by model name): another
    test's engine may be exiting beside them, so counting children does not find them."""
    return {}


@pytest.fixture(scope="session")
async def vllm_handle(
    demo_model_path: Path, vllm_cores: dict[str, set[int]]
) -> AsyncIterator[VllmHandle]:
    """A started ``vllm`` model handle (agent LLM + raw chat API) on the demo model."""
    handle = create_handle(
        {
            "name": "demo",
            "backend": "vllm",
            "path": str(demo_model_path),
            "engine": ENGINE_ARGS,
            "tool_call_parser": "hermes",
            "gen_params": {"temperature": 0, "max_new_tokens": 32},
        }
    )
    assert isinstance(handle, VllmHandle)
    before = engine_core_pids()
    await handle.start()
    vllm_cores["demo"] = engine_core_pids() - before
    yield handle
    await handle.close()


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """torch and vLLM warn about their own deprecated internals while the engine loads."""
    here = Path(__file__).parent
    for item in items:
        if here in item.path.parents:
            item.add_marker(pytest.mark.filterwarnings("ignore::DeprecationWarning"))
            item.add_marker(pytest.mark.filterwarnings("ignore::FutureWarning"))


@pytest.fixture(scope="session")
def default_model_path() -> Path:
    """SmolLM2-135M-Instruct, converted once into the cache (``make install`` does it first)."""
    from app.default_model import prepare

    try:
        return prepare()
    except Exception as exc:  # offline and never prepared
        pytest.fail(f"default model not prepared (run `agentstation default-model`): {exc}")
