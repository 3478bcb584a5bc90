"""api_keys.models: the raw models a key may use (NULL: all of them)

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-25 02:40:00

``agentstation keys create --models a,b`` stores the list; /v1/models, raw-model chat
completions and agent specs then see only those models for that key.
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("api_keys", sa.Column("models", sa.JSON(), nullable=True))


def downgrade() -> None:
    op.drop_column("api_keys", "models")
