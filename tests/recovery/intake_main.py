"""One intake process for the kill-point test: ingest a mention and a follow-up, then resume.

``python -m tests.recovery.intake_main <db_url>``. The follow-up's first append is refused by
the store (once per process), so it takes the stored-plan path: the fault points of both the
one-transaction path and the plan path are reached in one run.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

from routing.config import DaemonsConfig, RoutingConfig
from routing.intake import Router
from routing.policy import RoutingPolicy
from routing.signal import Signal
from runtime.errors import Retryable
from runtime.reporting import ReportingPolicy
from runtime.scheduler import AppendOutcome, Scheduler
from runtime.store.engine import Database, Transaction
from runtime.store.records import MailboxPart
from tests.factories import THREAD as THREAD_REF
from tests.factories import make_signal

THREAD = str(THREAD_REF)  # the objective key
POLICY = RoutingPolicy.from_config(
    RoutingConfig(channel_repos={"C1": "acme/api"}), DaemonsConfig(), slack_allowed_users=("U1",)
)


def _signal(delivery_id: str, ts: str, text: str, *, mention: bool) -> Signal:
    return make_signal(
        delivery_id=delivery_id,
        kind="mention" if mention else "thread_reply",
        text=text,
        addresses_bot=mention,
        received_at=datetime(2026, 12, 4, 12, 0, tzinfo=UTC),
        dedupe_key=f"slack:T1:C1:{ts}",
        event_action="app_mention" if mention else "message",
    )


MENTION = _signal("Ev-mention", "1700000000.000100", "fix the login bug", mention=True)
FOLLOW_UP = _signal("Ev-follow-up", "1700000000.000200", "only in Safari", mention=False)


class RefusesFirstAppend(Scheduler):
    """The store refuses the first append of this process, as a locked database does."""

    refused = False

    def append_mailbox(
        self, session: Transaction, task_id: str, key: str, parts: Sequence[MailboxPart],
        author: str | None = None,
    ) -> AppendOutcome:
        if not self.refused:
            self.refused = True
            raise Retryable("database unavailable: OperationalError")
        return super().append_mailbox(session, task_id, key, parts, author)


async def main(db_url: str) -> None:
    db = Database.from_url(db_url)
    router = Router(
        RefusesFirstAppend(db), db, POLICY, reporting=ReportingPolicy(), retry_delays=(0.01,)
    )
    for signal in (MENTION, FOLLOW_UP):
        await router.ingest(
            signal, provider="slack", delivery_id=signal.delivery_id, raw_kind=signal.kind
        )
    await router.resume_pending(older_than=timedelta(0))
    db.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1]))
