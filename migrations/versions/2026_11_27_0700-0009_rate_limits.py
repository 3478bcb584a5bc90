"""rate_limits: the fleet's shared rate-limit counters (one GCRA row per caller)

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-27 07:00:00

Every replica on one PostgreSQL database admits a caller's request with one statement on this
table (app/ops/shared_limits.py), so N replicas admit the configured rate once, not N times.
Unlogged on PostgreSQL: counters are not worth a WAL write per request, and a crash that
empties the table only forgets who was near their limit. SQLite (one process) counts in memory
and leaves the table empty.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "rate_limits",
        sa.Column("key", sa.String(200), primary_key=True),
        sa.Column("tat", sa.Float(precision=53), nullable=False),
        prefixes=["UNLOGGED"] if postgres else [],
    )


def downgrade() -> None:
    op.drop_table("rate_limits")
