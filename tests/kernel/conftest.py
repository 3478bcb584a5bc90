"""Real sandboxed kernels: one pool for the module suite, with short limits so it stays quick."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from agents.sandbox import KernelPool, SandboxConfig

MiB = 1 << 20


def make_base_dir() -> Path:
    """A base dir every sandbox uid can traverse (pytest's tmp dirs are closed to them)."""
    base = Path(tempfile.mkdtemp(prefix="agentstation-sbx-"))
    base.chmod(0o711)
    return base


def sandbox_config(base: Path, **overrides: object) -> SandboxConfig:
    """Short limits: a stuck cell costs seconds, not minutes."""
    values: dict[str, object] = {
        "base_dir": base,
        "timeout_s": 3.0,
        "interrupt_grace_s": 1.0,
        "memory_bytes": 1024 * MiB,
        "max_procs": 64,
        "max_file_bytes": 32 * MiB,
        "workdir_bytes": 64 * MiB,
        "output_bytes": 64 * 1024,
        "max_kernels": 8,
    }
    values.update(overrides)
    return SandboxConfig(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def base_dir() -> Iterator[Path]:
    base = make_base_dir()
    yield base
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def pool(base_dir: Path) -> Iterator[KernelPool]:
    """The pool under attack; CI runs as root with bubblewrap, so it must reach L3."""
    os.environ["AGENTSTATION_TEST_SERVICE_SECRET"] = "do-not-leak"
    kernel_pool = KernelPool(sandbox_config(base_dir))
    level = kernel_pool.start_sync()
    assert level == "L3", (
        f"the sandbox self-test reached only {level}: the attack suite needs L3 "
        "(root, bubblewrap, unprivileged user namespaces; see docs/sandbox.md)"
    )
    yield kernel_pool
    kernel_pool.close()
