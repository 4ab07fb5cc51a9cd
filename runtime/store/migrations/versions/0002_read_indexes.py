"""Indexes for the operator views: outbox by task, tasks by creation time.

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("outbox") as batch:
        batch.create_index("ix_outbox_task", ["task_id"])
    with op.batch_alter_table("tasks") as batch:
        batch.create_index("ix_tasks_created", ["created_at", "id"])
        batch.create_index("ix_tasks_status_created", ["status", "created_at", "id"])


def downgrade() -> None:
    with op.batch_alter_table("tasks") as batch:
        batch.drop_index("ix_tasks_status_created")
        batch.drop_index("ix_tasks_created")
    with op.batch_alter_table("outbox") as batch:
        batch.drop_index("ix_outbox_task")
