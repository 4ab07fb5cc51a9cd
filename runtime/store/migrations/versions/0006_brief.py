"""A Signal keeps the message it is (a Slack message's ts, a GitHub comment's id, as a thread
reference) and that message's link: the worker reads both back to build the task brief.

Revision ID: 0006_brief
Revises: 0005_threads
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006_brief"
down_revision = "0005_threads"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("signals") as batch:
        batch.add_column(sa.Column("message_ref", sa.String(300), nullable=True))
        batch.add_column(sa.Column("url", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("signals") as batch:
        batch.drop_column("url")
        batch.drop_column("message_ref")
