"""GitHub on a real installation: deliveries held for the permission lookup, and the failed
deliveries Keel asked GitHub to redeliver.

Revision ID: 0008_github
Revises: 0008_context
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from runtime.store.models import UtcDateTime

revision = "0008_github"
down_revision = "0008_context"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "github_inbox",
        sa.Column("delivery_id", sa.String(length=200), primary_key=True),
        sa.Column("event", sa.String(length=60), nullable=False),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("received_at", UtcDateTime(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("next_at", UtcDateTime(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
    )
    op.create_index("ix_github_inbox_next_at", "github_inbox", ["next_at"])
    op.create_table(
        "github_redeliveries",
        sa.Column("guid", sa.String(length=200), primary_key=True),
        sa.Column("hook_id", sa.BigInteger(), nullable=False),
        sa.Column("delivered_at", UtcDateTime(), nullable=False),
        sa.Column("requested_at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("github_redeliveries")
    op.drop_index("ix_github_inbox_next_at", table_name="github_inbox")
    op.drop_table("github_inbox")
