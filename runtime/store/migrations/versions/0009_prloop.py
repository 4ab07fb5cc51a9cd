"""Pull requests linked to the objective of the task that opened them, and signals found by
objective and kind (to count a linked pull request's CI follow-ups).

Revision ID: 0009_prloop
Revises: 0008_github
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from runtime.store.models import UtcDateTime

revision = "0009_prloop"
down_revision = "0008_github"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "pull_links",
        sa.Column("repo", sa.String(length=200), primary_key=True),
        sa.Column("number", sa.Integer(), primary_key=True),
        sa.Column("objective_key", sa.String(length=500), nullable=False),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("head_ref", sa.String(length=300), nullable=False),
        sa.Column("head_sha", sa.String(length=64), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.Column("updated_at", UtcDateTime(), nullable=False),
    )
    op.create_index("ix_pull_links_head", "pull_links", ["repo", "head_sha"])
    op.create_index("ix_signals_objective_kind", "signals", ["objective_key", "kind"])


def downgrade() -> None:
    op.drop_index("ix_signals_objective_kind", table_name="signals")
    op.drop_index("ix_pull_links_head", table_name="pull_links")
    op.drop_table("pull_links")
