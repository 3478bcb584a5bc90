"""Makes OpenTelemetry not installed for the process that puts this folder on PYTHONPATH:
any ``import opentelemetry…`` raises ImportError, as in a venv without it. The tracing
benchmark's "not installed" gateway (bench/tracing.py)."""

from __future__ import annotations

import importlib.abc
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any


class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if fullname == "opentelemetry" or fullname.startswith("opentelemetry."):
            raise ImportError(f"No module named {fullname!r} (bench/no_otel_site)")
        return None


sys.meta_path.insert(0, _NotInstalled())
