"""Apply Alembic migrations programmatically (``agentstation migrate``, ``serve`` on SQLite)."""

from __future__ import annotations

import functools
from pathlib import Path

from alembic import command
from alembic.config import Config

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    """An Alembic config for ``url`` using the project's migrations directory."""
    config = Config(str(ROOT / "alembic.ini"))
    config.set_main_option("script_location", str(ROOT / "migrations"))
    config.attributes["url"] = url
    return config


def upgrade(url: str, revision: str = "head") -> None:
    """Migrate the database at ``url`` (blocking; call from a thread inside an event loop)."""
    command.upgrade(alembic_config(url), revision)


@functools.cache
def revisions() -> tuple[str, frozenset[str]]:
    """This release's head revision and every revision it knows (read once, blocking)."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(alembic_config(""))
    head = script.get_current_head()
    assert head is not None
    return head, frozenset(r.revision for r in script.walk_revisions())
