"""Model usage: every model call's tokens, cost and time, per task and per task tree.

Revision ID: 0008_context
Revises: 0007_slack
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from runtime.store.models import AutoId, UtcDateTime

revision = "0008_context"
down_revision = "0007_slack"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "model_calls",
        sa.Column("id", AutoId, primary_key=True, autoincrement=True),
        sa.Column("task_id", sa.String(length=40), nullable=False),
        sa.Column("root_id", sa.String(length=40), nullable=False),
        sa.Column("call_key", sa.String(length=100), nullable=False),
        sa.Column("purpose", sa.String(length=20), nullable=False),
        sa.Column("model", sa.String(length=200), nullable=False),
        sa.Column("prompt_tokens", sa.BigInteger(), nullable=False),
        sa.Column("completion_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.Column("seconds", sa.Float(), nullable=False),
        sa.Column("created_at", UtcDateTime(), nullable=False),
        sa.UniqueConstraint("task_id", "call_key", name="uq_model_calls_task_call"),
    )
    op.create_index("ix_model_calls_root", "model_calls", ["root_id"])


def downgrade() -> None:
    op.drop_index("ix_model_calls_root", table_name="model_calls")
    op.drop_table("model_calls")
