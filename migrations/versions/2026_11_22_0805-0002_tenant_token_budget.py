"""tenant token budget

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22 08:05:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("tenants", sa.Column("token_budget", sa.BigInteger(), nullable=True))
    op.add_column(
        "tenants",
        sa.Column("tokens_used", sa.BigInteger(), server_default="0", nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("tokens_used")
        batch.drop_column("token_budget")
