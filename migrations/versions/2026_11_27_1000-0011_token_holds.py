"""token_holds and tenants.tokens_held: a tenant's token budget reserved per model call

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-27 10:00:00

- ``tenants.tokens_held``: the tokens held by the tenant's model calls in flight, fleet-wide.
  A call of a tenant with a budget holds its worst case before it starts and replaces the hold
  by its real usage (added to ``tokens_used``) when it ends (app/ops/token_holds.py).
- ``token_holds``: one row per call in flight (its replica and tokens), so the holds of a
  replica that died are given back by the live replica that sweeps its runs.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "tenants",
        sa.Column("tokens_held", sa.BigInteger(), nullable=False, server_default="0"),
    )
    op.create_table(
        "token_holds",
        sa.Column("id", sa.String(32), primary_key=True),
        sa.Column(
            "tenant_id",
            sa.String(64),
            sa.ForeignKey("tenants.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("replica", sa.String(64), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_token_holds_replica", "token_holds", ["replica"])


def downgrade() -> None:
    op.drop_index("ix_token_holds_replica", table_name="token_holds")
    op.drop_table("token_holds")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("tokens_held")
