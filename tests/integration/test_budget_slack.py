"""A budget through Keel's real app and the Slack emulator: the task pushes its uncommitted
work to its branch and pauses with one question carrying Continue and Stop buttons; a click
from someone not allowed is refused in a note only they see; Continue from a person who may
start tasks grants one more budget (a second question when that is spent); Stop ends it."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from adapters.emulators.slack import SlackMessage
from runtime.store.engine import Database
from runtime.store.records import TaskStatus
from tests.integration.keel_live import (
    CHANNEL,
    MALLORY,
    PERSON,
    Live,
    live_keel,
    until,
    until_ended,
)


def _config(tmp_path: Path) -> dict[str, Any]:
    call = {"name": "run_command", "args": {"command": "true"}}
    write = {"name": "write_file", "args": {"path": "NOTES.md", "content": "half done\n"}}
    turns = [{"say": "noting", "tool_calls": [write]}]
    turns += [{"say": f"step {n}", "tool_calls": [call]} for n in range(40)]
    script = {"scripts": [{"turns": [*turns, {"say": "done"}]}]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    price = {"input_per_million": 100.0, "output_per_million": 100.0}
    return {
        "model": {
            "provider": "scripted",
            "script": str(tmp_path / "script.yaml"),
            "model": "scripted",
            "prices": {"scripted": price},
        },
        "workspace": {"sandbox": "none"},
        "slack": {"allowed_users": [PERSON]},
        "agents": {"default": {"limits": {"max_cost_usd": 1.0, "max_turns": 100}}},
    }


def _asks(live: Live, root_ts: str) -> list[SlackMessage]:
    return [m for m in live.slack.thread(CHANNEL, root_ts) if m.bot_id and "Paused" in m.text]


async def test_budget_asks_once_refuses_others_continues_for_a_writer_and_stops_on_request(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=_config(tmp_path)) as live:
        live.slack.add_user(MALLORY, "mallory")
        root = await live.start_thread("please run the checks until done")

        async def asked(n: int) -> bool:
            return len(_asks(live, root)) >= n

        await until(lambda: asked(1), 60, "the task never asked at its budget")
        [ask] = _asks(live, root)
        assert "reached its budget of $1.00" in ask.text and "`continue`" in ask.text
        task = await live.thread_task(db, root)
        assert task is not None and task.status == TaskStatus.waiting
        # The uncommitted file was committed and pushed to the task's branch before asking.
        branch = f"keel/{task.task_id}"
        assert f"pushed to `{branch}`" in ask.text
        bare = tmp_path / "keel" / "origin" / "acme" / "shop.git"
        shown = subprocess.run(
            ["git", "show", f"{branch}:NOTES.md"], cwd=bare, capture_output=True, text=True
        )
        assert shown.stdout == "half done\n", shown.stderr

        assert await live.send_click(live.click(ask, root, MALLORY, "continue")) == 200
        await live.note_shown_to(MALLORY)
        [note] = live.slack.ephemeral
        assert "not allowed" in note.text
        # Typed rather than clicked, the refusal is a reply in the thread.
        typed = live.reply(root, f"<@{live.slack.bot_user_id}> continue", user=MALLORY)
        await live.send_slack(typed)

        async def refused() -> bool:
            return any(
                m.bot_id and "Not continuing" in m.text for m in live.slack.thread(CHANNEL, root)
            )

        await until(refused, 15, "the typed continue was not refused in the thread")
        still = await live.thread_task(db, root)
        assert still is not None and still.status == TaskStatus.waiting
        assert len(_asks(live, root)) == 1

        assert await live.send_click(live.click(ask, root, PERSON, "continue")) == 200
        await until(lambda: asked(2), 60, "the task did not go on and ask again")
        second = _asks(live, root)[1]
        assert "reached its budget of $2.00" in second.text
        assert await live.send_click(live.click(second, root, PERSON, "stop")) == 200
        ended = await until_ended(db, task.task_id)
        asks = len(_asks(live, root))
    db.close()
    assert ended.status == TaskStatus.canceled
    assert asks == 2
