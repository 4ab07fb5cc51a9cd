"""Acting where people act, through Keel's real app: 👀 on the mention itself, 🛑 on any message
of the thread, and the Stop button on the progress message (signed like events, at
/slack/interactivity), which stops once, refuses others visibly and gives way to the outcome.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from sqlalchemy import select

from adapters.emulators.slack import SlackMessage
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.models import SignalRow
from runtime.store.records import Task, TaskStatus
from tests.integration.keel_live import (
    CHANNEL,
    MALLORY,
    PERSON,
    Live,
    live_keel,
    until,
    until_ended,
)


def _slow_job(tmp_path: Path) -> dict[str, Any]:
    call = {"name": "run_command", "args": {"command": "sleep 30", "timeout_s": 120}}
    script = {"scripts": [{"turns": [{"tool_calls": [call]}, {"say": "done"}]}]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    return {
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {"sandbox": "none"},
        "slack": {"allowed_users": [PERSON]},
    }


def _progress(live: Live, root_ts: str) -> SlackMessage | None:
    return next(
        (m for m in live.slack.thread(CHANNEL, root_ts) if m.bot_id and m.text.startswith("⏳")),
        None,
    )


async def _started(live: Live, db: Database, root_ts: str) -> tuple[Task, SlackMessage]:
    """A task working on the thread, with its progress message (and Stop button) posted."""

    async def posted() -> bool:
        progress = _progress(live, root_ts)
        shown = progress is not None and bool(progress.blocks)
        return shown and await live.thread_task(db, root_ts) is not None

    await until(posted, 30, "no progress message with a Stop button")
    task, progress = await live.thread_task(db, root_ts), _progress(live, root_ts)
    assert task is not None and progress is not None
    return task, progress


async def test_eyes_land_on_the_mention_when_it_is_a_reply_in_a_thread(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url) as live:
        root_ts = live.slack.seed_message(CHANNEL, "the deploy is red again", user=PERSON)
        text = f"<@{live.slack.bot_user_id}> can you look?"
        mention_ts = live.slack.seed_message(CHANNEL, text, user=PERSON, thread_ts=root_ts)
        event = live.event(mention_ts, text, kind="app_mention", thread_ts=root_ts)
        [response] = await live.send_slack(event)
        assert response.status_code == 200

        async def reacted() -> bool:
            mention = live.slack.find(CHANNEL, mention_ts)
            return mention is not None and "eyes" in mention.reactions

        await until(reacted, 15, "no 👀")
        root = live.slack.find(CHANNEL, root_ts)
        assert root is not None and root.reactions == {}  # not on the thread's root
        counts = await live.counts()
        assert counts["tasks"] == 1


@pytest.mark.parametrize("target", ["progress", "mention", "root"])
async def test_stop_reaction_on_any_message_of_the_thread_stops_its_task(
    db_url: str, tmp_path: Path, target: str
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=_slow_job(tmp_path)) as live:
        root_ts = live.slack.seed_message(CHANNEL, "nightly build failed", user=PERSON)
        text = f"<@{live.slack.bot_user_id}> please rerun the slow job"
        mention_ts = live.slack.seed_message(CHANNEL, text, user=PERSON, thread_ts=root_ts)
        await live.send_slack(live.event(mention_ts, text, kind="app_mention", thread_ts=root_ts))
        task, progress = await _started(live, db, root_ts)
        item_ts = {"progress": progress.ts, "mention": mention_ts, "root": root_ts}[target]

        await live.send_slack(live.reaction(item_ts, "octagonal_sign"))

        ended = await until_ended(db, task.task_id)
        reacted = live.slack.find(CHANNEL, item_ts)
    db.close()
    assert ended.status == TaskStatus.canceled, ended.result
    assert reacted is not None and reacted.reactions.get("octagonal_sign") == [
        live.slack.bot_user_id
    ]  # the 🛑 answer sits where the person reacted


async def test_stop_button_stops_once_when_clicked_twice_and_gives_way_to_the_outcome(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=_slow_job(tmp_path)) as live:
        root_ts = await live.start_thread("please rerun the slow job")
        task, progress = await _started(live, db, root_ts)
        first = live.click(progress, root_ts, PERSON)
        assert await live.send_click(first) == 200
        second = live.click(progress, root_ts, PERSON)
        assert await live.send_click(second) == 200
        assert await live.send_click(first) == 200  # Slack delivering the first one again

        ended = await until_ended(db, task.task_id)
        stop = await db.read(lambda s: q.stop_request(s, task.task_id))

        async def outcome_shown() -> bool:
            shown = _progress(live, root_ts)
            return shown is not None and not shown.blocks and "stopped" in shown.text

        await until(outcome_shown, 15, "the Stop button was not replaced by the outcome")

        async def reply_shown() -> bool:  # after the progress edit: posts land in order
            return any("Stopped" in m.text for m in live.slack.thread(CHANNEL, root_ts))

        await until(reply_shown, 15, "no reply after the outcome")
        replies = [m.text for m in live.slack.thread(CHANNEL, root_ts) if m.bot_id]
        counts = await live.counts()
    db.close()
    assert ended.status == TaskStatus.canceled
    assert stop is not None and stop.requested_by == PERSON
    assert len([text for text in replies if "Stopped" in text]) == 1
    assert counts["signals"] == 3  # mention and two clicks; the redelivered click is known
    # A click after the stop took effect is told so, to the clicker alone; nothing else.
    assert all("nothing to stop" in note.text for note in live.slack.ephemeral)


async def test_stop_button_refuses_someone_not_allowed_with_a_note_only_they_see(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=_slow_job(tmp_path)) as live:
        live.slack.add_user(MALLORY, "mallory")
        root_ts = await live.start_thread("please rerun the slow job")
        task, progress = await _started(live, db, root_ts)

        assert await live.send_click(live.click(progress, root_ts, MALLORY)) == 200
        await live.note_shown_to(MALLORY)
        still = await db.read(lambda s: q.get_task(s, task.task_id))
        shown = _progress(live, root_ts)
    db.close()
    [note] = live.slack.ephemeral
    assert "not allowed" in note.text and note.thread_ts == root_ts
    assert still is not None and still.cancel_requested_at is None
    assert shown is not None and shown.blocks  # the button is still there for others


async def test_click_from_another_workspace_stops_nothing_when_one_bot_token_is_set(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=_slow_job(tmp_path)) as live:
        root_ts = await live.start_thread("please rerun the slow job")
        task, progress = await _started(live, db, root_ts)
        click = live.click(progress, root_ts, PERSON)
        foreign = {**click, "team": {"id": "T0FOREIGN1", "domain": "elsewhere"}}

        assert await live.send_click(foreign) == 200
        signals = await db.read(lambda s: list(s.scalars(select(SignalRow))))
        still = await db.read(lambda s: q.get_task(s, task.task_id))
    db.close()
    [click_row] = [s for s in signals if s.kind == "block_actions"]
    assert (click_row.decision, click_row.reason) == ("drop", "unauthorised")
    assert click_row.text.startswith("foreign workspace: event from Slack workspace 'T0FOREIGN1'")
    assert click_row.delivery_id.startswith("action:T0FOREIGN1:")  # each click its own record
    assert still is not None and still.cancel_requested_at is None
    assert live.slack.ephemeral == []  # nothing is said to another workspace
