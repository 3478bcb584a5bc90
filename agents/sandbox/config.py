"""Sandbox settings: one frozen dataclass, readable from ``AGENTSTATION_SANDBOX_*`` variables."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Literal

Level = Literal["L0", "L1", "L3"]
LEVELS: tuple[Level, ...] = ("L0", "L1", "L3")
ENV_PREFIX = "AGENTSTATION_SANDBOX_"
DEFAULT_KERNEL_ENV = Path("/opt/agentstation/kernel-env")

MiB = 1 << 20


def level_rank(level: str) -> int:
    """Order levels so that ``level_rank('L3') > level_rank('L1')``."""
    return [str(x) for x in LEVELS].index(level)


def _default_base_dir() -> Path:
    if os.geteuid() == 0:
        return Path("/var/lib/agentstation/sandbox")
    return Path.home() / ".cache" / "agentstation" / "sandbox"


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and placement of sandboxed kernels (env names: ``AGENTSTATION_SANDBOX_<FIELD>``)."""

    min_level: Level = "L3"
    base_dir: Path = field(default_factory=_default_base_dir)
    kernel_env: Path = DEFAULT_KERNEL_ENV
    timeout_s: float = 30.0
    interrupt_grace_s: float = 2.0
    start_timeout_s: float = 30.0
    memory_bytes: int = 1024 * MiB
    max_procs: int = 64
    max_file_bytes: int = 256 * MiB
    workdir_bytes: int = 1024 * MiB
    tmp_bytes: int = 64 * MiB
    output_bytes: int = 256 * 1024
    cpu_seconds: int = 3600
    idle_timeout_s: float = 900.0
    max_kernels: int = 16
    queue_timeout_s: float = 10.0
    start_concurrency: int = field(default_factory=lambda: os.cpu_count() or 2)
    # Start a session's kernel when the session is created (a free slot only), not in its
    # first cell: KernelPool.prestart, called by the gateway's POST /v1/sessions.
    prestart: bool = True
    uid_base: int = 200_000
    uid_count: int = 10_000

    @property
    def kernel_python(self) -> Path:
        """The interpreter kernels run with."""
        return self.kernel_env / "bin" / "python"

    @property
    def max_message_bytes(self) -> int:
        """zmq ``MAXMSGSIZE``: a larger message drops the connection instead of being read."""
        return 4 * self.output_bytes + 4 * MiB

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> SandboxConfig:
        """Build from ``AGENTSTATION_SANDBOX_*`` variables (unset ones keep their defaults)."""
        env = os.environ if environ is None else environ
        values: dict[str, object] = {}
        for f in fields(cls):
            raw = env.get(ENV_PREFIX + f.name.upper())
            if raw is None or raw == "":
                continue
            values[f.name] = _parse(f.name, raw, cls.__dataclass_fields__[f.name].type)
        return cls(**values)  # type: ignore[arg-type]


def _parse(name: str, raw: str, type_name: object) -> object:
    text = str(type_name)
    try:
        if text == "Path":
            return Path(raw)
        if text == "Level":
            if raw.upper() not in LEVELS:
                raise ValueError(f"expected one of {', '.join(LEVELS)}")
            return raw.upper()
        if text == "bool":
            return _flag(raw)
        if text == "int":
            return int(raw)
        if text == "float":
            return float(raw)
    except ValueError as exc:
        raise ValueError(f"{ENV_PREFIX}{name.upper()}={raw!r}: {exc}") from exc
    return raw


def _flag(raw: str) -> bool:
    value = raw.strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError("expected true or false (1/0, yes/no, on/off)")
