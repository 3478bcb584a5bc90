"""response_continuations: a response that answered another's approval requests

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-27 14:00:00

Answering a Responses API approval (``mcp_approval_response`` items with
``previous_response_id``) makes a new response, as OpenAI does, while the run goes on as it
did (the same run, its log numbered on). The new response is one row here: its id, its run,
its segment (the part of the run's log after the run's ``segment``-th pause) and what it
repeats of its request. One row per (run, segment): of two answers to one pause, one wins.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from app.db.base import UTCDateTime

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "response_continuations",
        sa.Column("id", sa.String(64), nullable=False),
        sa.Column("tenant_id", sa.String(64), nullable=False),
        sa.Column("run_id", sa.String(64), nullable=False),
        sa.Column("segment", sa.Integer(), nullable=False),
        sa.Column("request", sa.JSON(), nullable=False),
        sa.Column("created_at", UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_response_continuations_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_response_continuations_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_response_continuations")),
        sa.UniqueConstraint("run_id", "segment", name=op.f("uq_response_continuations_run_id")),
    )


def downgrade() -> None:
    op.drop_table("response_continuations")
