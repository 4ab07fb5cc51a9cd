"""Workspaces have an owner: the machine that holds a task tree's workspace, with the
snapshot another machine restores when that machine is lost.

Revision ID: 0011_workspace_owners
Revises: 0010_outbox
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from runtime.store.models import UtcDateTime

revision = "0011_workspace_owners"
down_revision = "0010_outbox"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "machines",
        sa.Column("machine_id", sa.String(length=200), primary_key=True),
        sa.Column("lease_expires_at", UtcDateTime(), nullable=False),
        sa.Column("seen_at", UtcDateTime(), nullable=False),
    )
    op.create_table(
        "workspace_owners",
        sa.Column("root_id", sa.String(length=40), primary_key=True),
        sa.Column("machine_id", sa.String(length=200), nullable=False),
        sa.Column("since", UtcDateTime(), nullable=False),
        sa.Column("snapshot_sha", sa.String(length=64), nullable=True),
        sa.Column("snapshot_tree", sa.String(length=64), nullable=True),
        sa.Column("snapshot_turn", sa.Integer(), nullable=True),
        sa.Column("snapshot_at", UtcDateTime(), nullable=True),
        sa.Column("taken_from", sa.String(length=200), nullable=True),
    )


def downgrade() -> None:
    op.drop_table("workspace_owners")
    op.drop_table("machines")
