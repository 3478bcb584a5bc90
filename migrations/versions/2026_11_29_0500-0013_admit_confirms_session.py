"""agentstation_admit says whether the session is still at the agent and version the turn used

Revision ID: 0013
Revises: 0012
Create Date: 2026-11-29 05:00:00

A turn of a session kept in process (``app/services/turns.py: _look_up``) runs no lookup; its
entry expired ``AGENTSTATION_SESSION_CACHE_TTL_S`` after it was stored, so a session turned
every second or so was looked up again every other turn (0.3 lookups per turn in
bench/persistence.py: one round trip each). The admission already reads the session's row;
the new result column ``o_current`` answers whether that row still names the agent (by name)
and version the turn was submitted with, so a confirmed entry is kept for another TTL and an
outdated one dropped. Otherwise the function is 0008's.
"""

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ARGS = (
    "text, boolean, boolean, bigint, bigint, text, text, text, text, integer, json, json, text, "
    "timestamptz, boolean"
)


def _migration_0008() -> object:
    path = Path(__file__).with_name("2026_11_26_0000-0008_admit_idempotency.py")
    spec = importlib.util.spec_from_file_location("migration_0008", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _admit() -> str:
    """0008's function with the column ``o_current``."""
    old = str(_migration_0008().ADMIT)  # type: ignore[attr-defined]
    edits = [
        (
            "RETURNS TABLE (o_rev integer, o_active text[], o_status text, o_found text)",
            "RETURNS TABLE (o_rev integer, o_active text[], o_status text, o_found text,\n"
            "               o_current boolean)",
        ),
        ("    v_status text := 'queued';\n", "    v_status text := 'queued';\n    v_current boolean;\n"),
        (
            "RETURN QUERY SELECT 0, ARRAY[]::text[], 'existing'::text, v_found;",
            "RETURN QUERY SELECT 0, ARRAY[]::text[], 'existing'::text, v_found, false;",
        ),
        (
            "                  WHERE r.session_pk = s.pk AND r.status = 'requires_action')\n"
            "      INTO v_rev, v_active, v_waiting\n",
            "                  WHERE r.session_pk = s.pk AND r.status = 'requires_action'),\n"
            "           s.agent_version = p_agent_version AND EXISTS(\n"
            "               SELECT 1 FROM agents a WHERE a.id = s.agent_id AND a.name = p_agent)\n"
            "      INTO v_rev, v_active, v_waiting, v_current\n",
        ),
        (
            "RETURN QUERY SELECT v_rev, v_active, NULL::text, NULL::text;",
            "RETURN QUERY SELECT v_rev, v_active, NULL::text, NULL::text, v_current;",
        ),
        (
            "RETURN QUERY SELECT v_rev, v_active, v_status, NULL::text;",
            "RETURN QUERY SELECT v_rev, v_active, v_status, NULL::text, v_current;",
        ),
    ]
    new = old
    for before, after in edits:
        assert new.count(before) >= 1, before
        new = new.replace(before, after)
    return new


ADMIT = _admit()


def upgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        # The result columns change: CREATE OR REPLACE cannot change a function's row type.
        op.execute(f"DROP FUNCTION IF EXISTS agentstation_admit({ARGS})")
        op.execute(ADMIT)


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS agentstation_admit({ARGS})")
        op.execute(str(_migration_0008().ADMIT))  # type: ignore[attr-defined]
