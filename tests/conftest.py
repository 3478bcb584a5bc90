"""Suite-wide settings: no network lookups from libraries, no usage stats."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) a test file runs on one worker, so
    its module fixtures are made once; tests/vllm and tests/kernel each stay on one worker, so
    their session fixtures (the engine, the attacked kernel pool) are made once too.
    NOT in effect with pytest 9.2 + xdist 3.8: xdist's hook runs before these marks and writes
    ``item._nodeid``, which pytest 9 no longer reads, so no group reaches the scheduler. Making
    it work (the ``@group`` suffix on ``item._id``, tried at bfa2e42) changed which tests meet
    on a worker and three CI runs each failed a different load-sensitive test: reverted until
    those are steady (bench/README.md has no figure for it; the closing note of 2026-11-29 has
    the failures)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    here = Path(__file__).parent
    shared = {here / "vllm", here / "kernel"}
    for item in items:
        folder = next((d for d in shared if d in item.path.parents), None)
        group = str((folder or item.path).relative_to(here))
        item.add_marker(pytest.mark.xdist_group(group))
