"""Where a Slack post landed is written as a thread reference naming the message.

Slack posts used to record ``slack:{channel}:{ts}`` (``fallback:`` in front when the origin
refused them), a form only the outbox could read; every other ``landed_on`` was already a
thread reference. They become ``slack:{team}/{channel}/{thread_ts}:{ts}``, which
``runtime.threads`` reads like any other reference. The row's own thread supplies the team
and the thread. A post that fell back landed in the configured fallback thread, which the
database does not know: the message stands for its own thread there (an edit needs only the
channel and the message), and the team is the one Keel's other Slack threads name. A
fallback row with no Slack thread anywhere to take a team from is left as it was; the outbox
then reports its edit as failed, with the reason, instead of guessing.

Revision ID: 0005_threads
Revises: 0004
"""

from __future__ import annotations

import re

import sqlalchemy as sa
from alembic import op

from runtime.threads import BadThreadRef, SlackThread, parse_landed, parse_thread

revision = "0005_threads"
down_revision = "0004"
branch_labels = None
depends_on = None

_LEGACY = re.compile(r"(?P<fallback>fallback:)?slack:(?P<channel>[^\s/:]+):(?P<ts>\d+\.\d+)")
_SLACK_ROWS = sa.text(
    "SELECT id, thread_ref, landed_on FROM outbox "
    "WHERE landed_on LIKE 'slack:%' OR landed_on LIKE 'fallback:slack:%'"
)
_ANY_SLACK_THREAD = sa.text(
    "SELECT thread_ref FROM outbox WHERE thread_ref LIKE 'slack:%' "
    "UNION SELECT thread_ref FROM signals WHERE thread_ref LIKE 'slack:%'"
)
_SET = sa.text("UPDATE outbox SET landed_on = :landed_on WHERE id = :outbox_id")


def upgrade() -> None:
    connection = op.get_bind()
    rows = connection.execute(_SLACK_ROWS).all()
    team = _any_team(connection) if rows else None
    for outbox_id, thread_ref, landed_on in rows:
        legacy = _LEGACY.fullmatch(landed_on)
        if legacy is None:
            continue  # already a thread reference (a reaction, or a post written since)
        landed = _landed(legacy, _slack_or_none(thread_ref), team)
        if landed is not None:
            connection.execute(_SET, {"landed_on": landed, "outbox_id": outbox_id})


def downgrade() -> None:
    connection = op.get_bind()
    for outbox_id, _, landed_on in connection.execute(_SLACK_ROWS).all():
        try:
            landed = parse_landed(landed_on)
        except BadThreadRef:
            continue
        message = landed.message
        if not isinstance(message, SlackThread) or message.message_ts is None:
            continue  # a reaction: its thread reference is what it always recorded
        prefix = "fallback:" if landed.fallback else ""
        legacy = f"{prefix}slack:{message.channel}:{message.message_ts}"
        connection.execute(_SET, {"landed_on": legacy, "outbox_id": outbox_id})


def _landed(legacy: re.Match[str], origin: SlackThread | None, team: str | None) -> str | None:
    channel, ts = legacy["channel"], legacy["ts"]
    if legacy["fallback"]:
        team = origin.team if origin is not None else team
        return f"fallback:{SlackThread(team, channel, ts, ts)}" if team else None
    if origin is None:
        return None
    return str(SlackThread(origin.team, channel, origin.thread_ts, ts))


def _any_team(connection: sa.Connection) -> str | None:
    for (thread_ref,) in connection.execute(_ANY_SLACK_THREAD):
        found = _slack_or_none(thread_ref)
        if found is not None:
            return found.team
    return None


def _slack_or_none(text: str) -> SlackThread | None:
    try:
        found = parse_thread(text)
    except BadThreadRef:
        return None
    return found if isinstance(found, SlackThread) else None
