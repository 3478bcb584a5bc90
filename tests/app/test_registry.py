"""Operators add agent kinds and tools through entry points."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.runtime.builders import default_registry
from app.schemas.agents import AgentSpec

PLUGIN = '''
from agents.actions import BaseAction


class Shout(BaseAction):
    """Says it loudly."""

    def run(self, text: str) -> str:
        """Upper-case the text.

        Args:
            text: what to shout.
        """
        return text.upper()


def build_echo(spec, ctx):
    from agents.agent import AsyncAgent

    return AsyncAgent(llm=ctx.llms[spec.model], name=ctx.name)
'''


@pytest.fixture
def plugin(tmp_path: Path) -> Iterator[None]:
    (tmp_path / "acme_plugin.py").write_text(PLUGIN)
    dist = tmp_path / "acme_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: acme-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[agentstation.agents]\nechoer = acme_plugin:build_echo\n\n"
        "[agentstation.tools]\nShout = acme_plugin:Shout\n"
    )
    sys.path.insert(0, str(tmp_path))
    yield
    sys.path.remove(str(tmp_path))
    sys.modules.pop("acme_plugin", None)


def test_entry_points_add_kinds_and_tools(plugin: None) -> None:
    registry = default_registry()
    assert "echoer" in registry.kinds and "Shout" in registry.tools
    spec = AgentSpec(kind="tool_agent", model="m", tools=[{"name": "Shout"}])
    registry.validate(spec, ["m"])
    assert registry.tools["Shout"]().name == "Shout"


def test_without_the_plugin_the_names_are_unknown() -> None:
    registry = default_registry()
    assert "echoer" not in registry.kinds and "Shout" not in registry.tools
