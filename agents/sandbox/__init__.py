"""Sandboxed IPython kernels: one per (session, agent), isolated in layers, bounded, reaped.

``KernelPool(SandboxConfig(...))`` → ``await pool.start()`` (self-test → ``pool.level``) →
``await pool.execute(session_key, code)`` → ``await pool.shutdown_session(key)`` /
``await pool.aclose()``. See docs/sandbox.md.
"""

from __future__ import annotations

import atexit
import threading

from agents.sandbox.config import LEVELS, Level, SandboxConfig
from agents.sandbox.output import CellResult
from agents.sandbox.pool import KernelPool, SandboxError

__all__ = [
    "LEVELS",
    "CellResult",
    "KernelPool",
    "Level",
    "SandboxConfig",
    "SandboxError",
    "default_pool",
]

_default: KernelPool | None = None
_default_lock = threading.Lock()


def default_pool() -> KernelPool:
    """The process-wide pool for tools given none (configured from the environment)."""
    global _default
    with _default_lock:
        if _default is None or _default.closed:
            _default = KernelPool(SandboxConfig.from_env())
            atexit.register(_default.close)
        return _default
