"""runs.seq_reserved: the highest event id a run may have sent (durable resume after a crash)

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-25 02:00:00

A live run sends an event id only once it is stored or at most ``seq_reserved``, which it
raises durably, in blocks of 64, before it needs to; a run is created with the first block
reserved (this column's default, so run admission, ``agentstation_admit`` included, needs no
change). Recovery numbers the events it adds after ``seq_reserved``, so an id a dead server
sent never names another event. Runs that exist at upgrade get the default.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("seq_reserved", sa.Integer(), server_default="64", nullable=False)
    )


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("seq_reserved")
