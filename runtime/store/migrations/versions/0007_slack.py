"""Slack for real teams: sealed installations and OAuth states, buttons on outbox posts,
and finding a post by where it landed.

Revision ID: 0007_slack
Revises: 0006_brief
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from runtime.store.models import AutoId, UtcDateTime

revision = "0007_slack"
down_revision = "0006_brief"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.add_column(sa.Column("actions", sa.JSON(), nullable=True))
        batch.create_index("ix_outbox_landed_on", ["landed_on"])
    op.create_table(
        "installations",
        sa.Column("id", AutoId, primary_key=True, autoincrement=True),
        sa.Column("provider", sa.String(length=20), nullable=False),
        sa.Column("enterprise_id", sa.String(length=40), nullable=False),
        sa.Column("team_id", sa.String(length=40), nullable=False),
        sa.Column("kind", sa.String(length=20), nullable=False),
        sa.Column("user_id", sa.String(length=40), nullable=False),
        sa.Column("sealed", sa.Text(), nullable=False),
        sa.Column("installed_at", UtcDateTime(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.UniqueConstraint(
            "provider", "enterprise_id", "team_id", "kind", "user_id", name="uq_installations"
        ),
    )
    op.create_table(
        "oauth_states",
        sa.Column("state", sa.String(length=200), primary_key=True),
        sa.Column("expires_at", UtcDateTime(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("oauth_states")
    op.drop_table("installations")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_index("ix_outbox_landed_on")
        batch.drop_column("actions")
