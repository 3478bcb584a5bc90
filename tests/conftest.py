"""Suite-wide settings: no network lookups from libraries, no usage stats."""

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

os.environ.setdefault("VLLM_NO_USAGE_STATS", "1")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under ``pytest -n N --dist loadgroup`` (``make test``) a test file runs on one worker, so
    its module fixtures are made once; tests/vllm and tests/kernel each stay on one worker, so
    their session fixtures (the engine, the attacked kernel pool) are made once too."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    here = Path(__file__).parent
    shared = {here / "vllm", here / "kernel"}
    for item in items:
        folder = next((d for d in shared if d in item.path.parents), None)
        group = str((folder or item.path).relative_to(here))
        item.add_marker(pytest.mark.xdist_group(group))


class _GroupIds:
    """What xdist's ``--dist loadgroup`` does on a worker, done here: a test's group as the
    suffix of its id (``path::test@group``), which the controller's scheduler reads. xdist 3.8
    writes it into ``item._nodeid``, which pytest 9 no longer reads (an id is ``item._id``),
    and its hook runs before the marks above are added: without this no group reaches the
    scheduler and tests/vllm is spread over both workers, each building an engine."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    @pytest.hookimpl(wrapper=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> Iterator[None]:
        result = yield  # after every other implementation: the marks are on
        try:
            from _pytest.nodeid import NodeId
        except ImportError:  # an older pytest: xdist's own hook does it
            return result
        if not getattr(self.config.option, "loadgroup", False):  # a worker of -n, loadgroup
            return result
        for item in items:
            names = sorted({str(m.args[0]) for m in item.iter_markers("xdist_group") if m.args})
            if names and "@" not in item.nodeid:
                item._id = NodeId.parse(f"{item.nodeid}@{'_'.join(names)}")
        return result


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist"):
        config.pluginmanager.register(_GroupIds(config), "agentstation-xdist-group-ids")
