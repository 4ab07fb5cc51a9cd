"""Index pending signals, which the router resumes periodically, by decision and age.

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("signals") as batch:
        batch.create_index("ix_signals_decision_received", ["decision", "received_at"])


def downgrade() -> None:
    with op.batch_alter_table("signals") as batch:
        batch.drop_index("ix_signals_decision_received")
