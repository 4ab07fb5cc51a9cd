"""Posts the outbox gave up on are ``undelivered`` (they were ``failed``).

Revision ID: 0010_outbox
Revises: 0009_prloop
"""

from __future__ import annotations

from alembic import op

revision = "0010_outbox"
down_revision = "0009_prloop"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("UPDATE outbox SET state = 'undelivered' WHERE state = 'failed'")


def downgrade() -> None:
    op.execute("UPDATE outbox SET state = 'failed' WHERE state = 'undelivered'")
