"""End to end over the emulators and a real git remote: a Slack mention becomes a pull
request (the demo's job); a reviewer's inline comment on it starts one linked task of the same
objective, working on the pull request's branch, which pushes a fix, replies in that review
thread with the commit's SHA and answers on the pull request, while the Slack thread gets one
short line. A redelivery of the comment starts nothing more."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from sqlalchemy import select

from adapters.demo.repo import branch_head
from adapters.emulators.corpus import load_github_example
from adapters.emulators.slack import SlackMessage
from runtime.store import executions, links
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.models import TaskRow
from runtime.store.records import Task, TaskStatus
from tests.integration.keel_live import CHANNEL, SHOP, Live, demo_script_after, drive, live_keel

REVIEW = "add() should also be documented for negative numbers, please."
FIXED = '''"""Tiny arithmetic helpers used by the checkout."""


def add(a: int, b: int) -> int:
    """The sum of a and b, negative numbers included."""
    return a + b
'''


def _review_script() -> dict[str, Any]:
    """What the model does for the review: edit, commit, push the PR's branch, reply."""
    return {
        "match": "negative numbers",
        "turns": [
            {
                "tool_calls": [
                    {"name": "write_file", "args": {"path": "calc.py", "content": FIXED}}
                ],
            },
            {"tool_calls": [{"name": "git_commit", "args": {"message": "Document add()"}}]},
            {"tool_calls": [{"name": "git_push", "args": {"branch": "keel/fix-add"}}]},
            {
                "tool_calls": [
                    {
                        "name": "reply_to_review_threads",
                        "args": {"number": 1, "text": "Documented add() for negative numbers."},
                    }
                ]
            },
            {"say": "Documented add() as the review asked and pushed it to the pull request."},
        ],
    }


def _script(folder: Path) -> Path:
    return demo_script_after(folder, _review_script())


def _review_comment_event(live: Live, comment_id: int) -> dict[str, Any]:
    return load_github_example(
        "pull_request_review_comment/created",
        **{
            "repository.full_name": SHOP,
            "repository.name": "shop",
            "repository.owner.login": "acme",
            "pull_request.number": 1,
            "comment.id": comment_id,
            "comment.body": REVIEW,
            "comment.path": "calc.py",
            "sender.login": "Codertocat",
        },
    )


async def test_inline_review_comment_is_fixed_pushed_and_answered_in_its_thread(
    db_url: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "keel"
    origin = workdir / "origin" / "acme" / "shop.git"
    extra = {"model": {"script": str(_script(tmp_path / "model"))}}
    with live_keel(workdir, db_url, workers=True, extra=extra) as live:
        first_id, root = await drive(live)
        db = Database.from_url(db_url)
        before = branch_head(origin, "keel/fix-add")
        link = await db.read(lambda s: links.pull_link(s, SHOP, 1))
        assert link is not None and link.task_id == first_id and link.head_sha == before
        live.github.set_permission(SHOP, "Codertocat", "write")
        comment_id = live.github.add_review_comment(
            SHOP, 1, REVIEW, user="Codertocat", path="calc.py", line=4, diff_hunk="@@ -1,4 +1,4 @@"
        )
        event = _review_comment_event(live, comment_id)
        await live.send_github("pull_request_review_comment", event, delivery_id="r-1", times=2)
        await live.send_github("pull_request_review_comment", event, delivery_id="r-2")

        objective = f"slack:{live.slack.team_id}/{CHANNEL}/{root}"

        async def followed() -> Task | None:
            task = await db.read(lambda s: q.latest_by_objective(s, objective))
            if task is None or task.task_id == first_id:
                return None
            return task if TaskStatus(task.status).is_terminal else None

        async with asyncio.timeout(90):
            while (second := await followed()) is None:
                await asyncio.sleep(0.1)
        posts: list[SlackMessage] = []
        async with asyncio.timeout(30):
            while not posts:
                posts = [m for m in live.slack.bot_posts(CHANNEL) if m.text.startswith("Updated")]
                await asyncio.sleep(0.1)
        after = branch_head(origin, "keel/fix-add")
        run = await db.read(lambda s: executions.load_run(s, second.task_id))
        moved = await db.read(lambda s: links.pull_link(s, SHOP, 1))
        query = select(TaskRow).where(TaskRow.objective_key == objective)
        tasks = await db.read(lambda s: list(s.scalars(query)))
        db.close()
    assert second.status == "succeeded", second.result
    assert second.follows_task_id == first_id
    system = run.state.system if run is not None else None
    assert system is not None and f"Earlier work on this request (task {first_id}" in system
    assert after != before and moved is not None and moved.head_sha == after
    replies = live.github.repos[SHOP].review_comments.values()
    thread = [c for c in replies if c.in_reply_to == comment_id]
    assert len(thread) == 1
    assert f"Addressed in {after}." in thread[0].body and thread[0].user.login == "keel-bot"
    assert len(posts) == 1 and "after its review or CI" in posts[0].text
    assert len(tasks) == 2
