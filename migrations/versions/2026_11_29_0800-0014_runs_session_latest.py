"""runs (session_pk, created_at, id): a session's latest run without sorting its runs

Revision ID: 0014
Revises: 0013
Create Date: 2026-11-29 08:00:00

A stored ``/v1/responses`` turn's chain-end statement (``app/services/responses_plan.py:
chain_end``) reads the session's latest run (``ORDER BY created_at DESC, id DESC LIMIT 1``).
With only ``ix_runs_session_pk_status`` it read and sorted all the session's runs, a cost that
grew with the chain; this index answers it with one backward index step.
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0014"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_runs_session_pk_created_at", "runs", ["session_pk", "created_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_session_pk_created_at", table_name="runs")
