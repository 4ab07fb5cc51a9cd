"""Redelivery storm against the real app: every corpus webhook and a set of Slack messages
delivered 1–5 times, concurrently and out of order, plus Slack's double delivery.

Exactly one Signal per natural key, one Task per objective, one mailbox message per follow-up.
"""

from __future__ import annotations

import asyncio
import json
import random
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from functools import partial
from pathlib import Path
from typing import Any

import httpx
from sqlalchemy import select

from adapters.emulators.corpus import corpora_root, load_github_example
from runtime.store.engine import Database
from runtime.store.models import MailboxMessageRow, SignalRow, TaskRow
from tests.integration.keel_live import CHANNEL, GH_REPO, Live, live_keel

MENTIONS = 4
COMMENTS = 3
FIRST_ISSUE = 901  # threads of their own: corpus comments on other issues never join them

Send = Callable[[], Awaitable[list[httpx.Response]]]


def _corpus_deliveries(live: Live, rng: random.Random) -> list[Send]:
    sends: list[Send] = []
    for path in sorted((corpora_root() / "github" / "webhooks").glob("*/*.json")):
        event = path.parent.name
        payload = json.loads(path.read_text())
        delivery = str(uuid.uuid4())
        times = rng.randint(1, 5)
        sends.append(partial(live.send_github, event, payload, delivery_id=delivery, times=times))
    return sends


def _comment(number: int) -> dict[str, Any]:
    return load_github_example(
        "issue_comment/created",
        **{
            "comment.body": f"@keel please fix issue {number}",
            "comment.id": 9000 + number,
            "issue.number": number,
        },
    )


async def _storm(sends: list[Send], rng: random.Random) -> list[int]:
    rng.shuffle(sends)
    results = await asyncio.gather(*(send() for send in sends))
    return [r.status_code for batch in results for r in batch]


async def _rows(db_url: str) -> tuple[list[Any], list[Any], list[Any]]:
    db = Database.from_url(db_url)

    def read(session: Any) -> tuple[list[Any], list[Any], list[Any]]:
        signals = session.execute(
            select(
                SignalRow.provider, SignalRow.delivery_id, SignalRow.dedupe_key, SignalRow.reason
            )
        ).all()
        tasks = session.execute(select(TaskRow.task_id, TaskRow.objective_key)).all()
        mail = session.execute(
            select(MailboxMessageRow.task_id, MailboxMessageRow.idempotency_key)
        ).all()
        return list(signals), list(tasks), list(mail)

    try:
        return await db.read(read)
    finally:
        db.close()


async def test_one_signal_task_and_message_each_when_everything_is_redelivered_out_of_order(
    db_url: str, tmp_path: Path
) -> None:
    rng = random.Random()
    with live_keel(tmp_path, db_url) as live:
        roots: list[str] = []
        first: list[Send] = []
        for n in range(MENTIONS):
            event = live.mention(f"please fix flaky test number {n}")
            roots.append(event["ts"])
            message = {**event, "type": "message"}
            # app_mention and message for one message, and the same message under a new id
            for variant, event_id in ((event, None), (message, None), (message, None)):
                times = rng.randint(1, 5)
                first.append(partial(live.send_slack, variant, event_id=event_id, times=times))
        for n in range(FIRST_ISSUE, FIRST_ISSUE + COMMENTS):
            delivery, times = str(uuid.uuid4()), rng.randint(1, 5)
            comment = _comment(n)
            first.append(
                partial(
                    live.send_github, "issue_comment", comment, delivery_id=delivery, times=times
                )
            )
        first += _corpus_deliveries(live, rng)
        statuses = await _storm(first, rng)
        follow_ups: list[Send] = []
        for root in roots:
            reply = live.reply(root, "it only fails on Safari")
            for _ in range(2):  # the same follow-up under two event ids, each redelivered
                times = rng.randint(1, 5)
                follow_ups.append(partial(live.send_slack, reply, times=times))
        statuses += await _storm(follow_ups, rng)
        await live.drained()  # GitHub requests are routed after their permission lookup
        team = live.slack.team_id
    assert set(statuses) == {200}

    signals, tasks, mail = await _rows(db_url)
    assert max(Counter((p, d) for p, d, _, _ in signals).values()) == 1
    assert max(Counter(k for _, _, k, _ in signals).values()) == 1
    # A repeat under a new delivery id is recorded as a dropped duplicate of the first.
    natural = [s for s in signals if not s[2].startswith("dup:")]
    assert {row[3] for row in signals if row[2].startswith("dup:")} <= {"duplicate"}
    assert len([s for s in natural if s[0] == "slack"]) == 2 * MENTIONS
    keys = Counter(row[2] for row in natural)
    comments = range(FIRST_ISSUE, FIRST_ISSUE + COMMENTS)
    assert [keys[f"github:{9000 + n}:created"] for n in comments] == [1] * COMMENTS
    per_objective = Counter(objective for _, objective in tasks)
    assert max(per_objective.values()) == 1, per_objective
    slack_objectives = {f"slack:{team}/{CHANNEL}/{root}" for root in roots}
    github_objectives = {
        f"github:{GH_REPO}#{n}" for n in range(FIRST_ISSUE, FIRST_ISSUE + COMMENTS)
    }
    assert slack_objectives | github_objectives <= set(per_objective)
    by_objective = {objective: task_id for task_id, objective in tasks}
    per_task = Counter(task_id for task_id, _ in mail)
    assert {by_objective[o]: per_task[by_objective[o]] for o in slack_objectives} == {
        by_objective[o]: 1 for o in slack_objectives
    }
    assert sum(per_task[by_objective[o]] for o in slack_objectives) == MENTIONS
