"""replicas (liveness), runs.replica (a run's owner) and session_kernels (a kernel's owner)

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-27 07:00:00

- ``replicas``: one row per running gateway replica, its heartbeat (``beat_at``) and state
  (``live`` / ``draining``); a replica whose beat is stale or whose database connections are
  gone is dead, and a live replica interrupts its runs (app/runtime/liveness.py).
- ``runs.replica``: the replica that runs (or will run) an active run. On PostgreSQL its
  default is the connection's ``agentstation.replica`` setting, which every connection of a
  replica carries (app/db/engine.py), so run admission (``agentstation_admit``) needs no change.
- ``session_kernels``: which kernel (replica and kernel name) a session's agent last used, so a
  kernel started afresh where a session had one before is reported (``kernel.restarted``).
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "replicas",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False, server_default="live"),
        sa.Column("started_at", UTCDateTime(timezone=True), nullable=False),
        sa.Column("beat_at", UTCDateTime(timezone=True), nullable=False),
    )
    postgres = op.get_context().dialect.name == "postgresql"
    default = sa.text("current_setting('agentstation.replica', true)") if postgres else None
    op.add_column("runs", sa.Column("replica", sa.String(64), nullable=True, server_default=default))
    # Active runs of one replica: the sweep of a dead replica's runs.
    op.create_index(
        "ix_runs_replica_active",
        "runs",
        ["replica"],
        postgresql_where=sa.text("status IN ('queued', 'running')"),
        sqlite_where=sa.text("status IN ('queued', 'running')"),
    )
    op.create_table(
        "session_kernels",
        sa.Column(
            "session_pk",
            sa.String(64),
            sa.ForeignKey("sessions.pk", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("agent", sa.String(128), primary_key=True),
        sa.Column("owner", sa.String(160), nullable=False),
        sa.Column("started_at", UTCDateTime(timezone=True), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("session_kernels")
    op.drop_index("ix_runs_replica_active", table_name="runs")
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("replica")
    op.drop_table("replicas")
