"""Apply Alembic migrations programmatically (``agentstation migrate``, ``serve`` on SQLite)."""

from __future__ import annotations

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
