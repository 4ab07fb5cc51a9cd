"""Code review as a job, end to end over the emulators, a real git remote and each database: a
review requested from the bot (delivered twice, and once more under another delivery id)
starts one read-only review task; its first review aims a comment outside the diff, which
comes back to the model as an error with nothing posted; the review it submits then lands
once (though the response to its POST is lost), with its inline comment on a diff line; the
reply on the pull request carries the review read back; the repository's REVIEW.md (on main,
in Keel's mirror) reached the model. A push is re-reviewed without repeating a fixed finding.
"""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from sqlalchemy import select

from adapters.emulators.corpus import load_github_example
from adapters.emulators.github_state import PullFile
from runtime.store import executions
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.models import TaskRow
from runtime.store.records import Task, TaskStatus
from tests.integration.keel_live import SHOP, Live, demo_script_after, live_keel

RULE = "Every new function needs a docstring."
PATCH = "@@ -1,3 +1,6 @@\n def add(a, b):\n     return a + b\n \n+\n+def sub(a, b):\n"
PATCH += "+    return a - a\n"
GOOD = {"path": "calc.py", "line": 6, "side": "RIGHT", "body": "sub() subtracts a from a."}
OFF_DIFF = {"path": "calc.py", "line": 60, "body": "not on the diff"}


def _review_script() -> dict[str, Any]:
    review = {"number": 1, "event": "REQUEST_CHANGES", "body": "sub() is wrong."}
    return {
        "match": "Review pull request #1",
        "turns": [
            {
                "tool_calls": [
                    {"name": "submit_review", "args": review | {"comments": [GOOD, OFF_DIFF]}}
                ],
            },
            {
                "expect_seen": ["calc.py line 60 (RIGHT) is not on the diff"],
                "tool_calls": [{"name": "submit_review", "args": review | {"comments": [GOOD]}}],
            },
            {"say": "Reviewed pull request #1: one finding, in sub()."},
        ],
    }


def _add_review_rules(origin: Path, scratch: Path) -> None:
    """A commit on main of the remote adding REVIEW.md, as its maintainers would."""

    def run(*args: str, cwd: Path) -> None:
        env = {
            "GIT_AUTHOR_NAME": "M",
            "GIT_AUTHOR_EMAIL": "m@x",
            "GIT_COMMITTER_NAME": "M",
            "GIT_COMMITTER_EMAIL": "m@x",
            "HOME": str(scratch),
            "PATH": "/usr/bin:/bin",
        }
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    run("clone", "-q", str(origin), str(scratch / "work"), cwd=scratch)
    (scratch / "work" / "REVIEW.md").write_text(f"# Review rules\n\n{RULE}\n")
    run("add", "REVIEW.md", cwd=scratch / "work")
    run("commit", "-qm", "Review rules", cwd=scratch / "work")
    run("push", "-q", "origin", "main", cwd=scratch / "work")
    # The pull request's branch, as its author pushed it.
    run("checkout", "-q", "-b", "feature", cwd=scratch / "work")
    (scratch / "work" / "calc.py").write_text("def sub(a, b):\n    return a - a\n")
    run("commit", "-qam", "Add sub", cwd=scratch / "work")
    run("push", "-q", "origin", "feature", cwd=scratch / "work")


def _requested(live: Live, head: str) -> dict[str, Any]:
    return load_github_example(
        "pull_request/review_requested",
        **{
            "repository.full_name": SHOP,
            "repository.name": "shop",
            "repository.owner.login": "acme",
            "pull_request.number": 1,
            "pull_request.head.sha": head,
            "requested_reviewer.login": "keel-bot",
            "sender.login": "Codertocat",
        },
    )


async def _ended_review(db: Database, timeout: float = 90) -> Task:
    async def ended() -> Task | None:
        task = await db.read(lambda s: q.latest_by_objective(s, f"github:{SHOP}#1"))
        return task if task is not None and TaskStatus(task.status).is_terminal else None

    async with asyncio.timeout(timeout):
        while (task := await ended()) is None:
            await asyncio.sleep(0.1)
    return task


async def test_requested_review_lands_once_on_diff_lines_with_its_read_back(
    db_url: str, tmp_path: Path
) -> None:
    workdir = tmp_path / "keel"
    extra = {"model": {"script": str(demo_script_after(tmp_path / "model", _review_script()))}}
    with live_keel(workdir, db_url, workers=True, extra=extra) as live:
        (tmp_path / "scratch").mkdir()
        _add_review_rules(workdir / "origin" / "acme" / "shop.git", tmp_path / "scratch")
        files = (PullFile("calc.py", "modified", 3, 0, PATCH),)
        live.github.set_permission(SHOP, "Codertocat", "write")
        live.github.add_pull(SHOP, "Add sub", user="Codertocat", head="feature", files=files)
        head = live.github.repos[SHOP].pulls[1].head_sha
        # The review's POST lands but its response is lost: found again by its marker.
        live.github.inject("pulls/create-review", "drop_response")
        event = _requested(live, head)
        await live.send_github("pull_request", event, delivery_id="rr-1", times=2)
        await live.send_github("pull_request", event, delivery_id="rr-2")
        db = Database.from_url(db_url)
        task = await _ended_review(db)
        run = await db.read(lambda s: executions.load_run(s, task.task_id))
        query = select(TaskRow).where(TaskRow.objective_key == f"github:{SHOP}#1")
        tasks = await db.read(lambda s: list(s.scalars(query)))
        await _until_replied(live)
        db.close()
    assert task.status == "succeeded", task.result
    assert task.agent == "review" and len(tasks) == 1
    # The review read the code it reviewed: its checkout is the pull request's head.
    checkout = workdir / "workspaces" / task.root_id
    shown = subprocess.run(["git", "-C", str(checkout), "rev-parse", "HEAD"], capture_output=True)
    assert shown.stdout.decode().strip() == head
    system = (run.state.system if run is not None else None) or ""
    assert RULE in system
    [review] = live.github.reviews_of(SHOP, 1)
    assert len(live.github.requests_to("POST", f"/repos/{SHOP}/pulls/1/reviews")) == 1
    assert live.github.fault_plan.faults[0].remaining == 0  # its response was lost
    assert (review.state, review.commit_id, review.user.login) == (
        "CHANGES_REQUESTED",
        head,
        "keel-bot",
    )
    inline = [c for c in live.github.repos[SHOP].review_comments.values()]
    assert [(c.path, c.line, c.review_id) for c in inline] == [("calc.py", 6, review.review_id)]
    replies = [c.body for c in live.github.repos[SHOP].comments.values()]
    assert any(f"Review read back on {head[:7]}: 1 comment" in body for body in replies), replies


async def _until_replied(live: Live) -> None:
    async with asyncio.timeout(30):
        while not any(
            "Review read back" in c.body for c in live.github.repos[SHOP].comments.values()
        ):
            await asyncio.sleep(0.1)


FIXED_PATCH = PATCH.replace("a - a", "a - b")
NEW_HEAD = "5" * 40
EARLIER_REVIEW, FINDING = 9001, 9002


def _re_review_script() -> dict[str, Any]:
    since = "Since the last review: sub() now subtracts b. Nothing new."
    reply = {"comment_id": FINDING, "body": "sub() subtracts b now.", "fixed": True}
    review = {"number": 1, "event": "COMMENT", "body": since, "replies": [reply]}
    return {
        "match": "Review pull request #1. \\(pushed to",
        "turns": [
            {"tool_calls": [{"name": "review_since", "args": {"number": 1}}]},
            {
                "expect_seen": [f'"comment_id": {FINDING}', "+    return a - b"],
                "tool_calls": [{"name": "submit_review", "args": review}],
            },
            {"say": "Re-reviewed pull request #1: the finding in sub() is fixed."},
        ],
    }


def _earlier_review(live: Live, head: str) -> None:
    """Keel's review of the first head, as submit_review left it: one finding on sub()."""
    from adapters.emulators.github_state import Review, ReviewComment
    from adapters.github.submit_review import review_key
    from adapters.github.surface import with_marker

    repo, bot = live.github.repos[SHOP], live.github.add_user("keel-bot")
    body = with_marker("sub() is wrong.", review_key(SHOP, 1, head))
    repo.reviews[EARLIER_REVIEW] = Review(
        EARLIER_REVIEW, 1, body, "CHANGES_REQUESTED", bot, head, 0
    )
    repo.review_comments[FINDING] = ReviewComment(
        FINDING, 1, "calc.py", 6, PATCH, str(GOOD["body"]), bot, head, 0, review_id=EARLIER_REVIEW
    )


def _pushed(live: Live) -> dict[str, Any]:
    return load_github_example(
        "pull_request/synchronize",
        **{
            "repository.full_name": SHOP,
            "repository.name": "shop",
            "repository.owner.login": "acme",
            "pull_request.number": 1,
            "pull_request.head.sha": NEW_HEAD,
            "pull_request.head.ref": "feature",
            "pull_request.draft": False,
            "pull_request.author_association": "COLLABORATOR",
            "sender.login": "Codertocat",
        },
    )


async def test_a_push_is_re_reviewed_answering_the_fixed_finding_instead_of_repeating_it(
    db_url: str, tmp_path: Path
) -> None:
    script = demo_script_after(tmp_path / "model", _re_review_script())
    extra = {"model": {"script": str(script)}, "review": {"auto": [{"repo": "acme/*"}]}}
    with live_keel(tmp_path / "keel", db_url, workers=True, extra=extra) as live:
        files = (PullFile("calc.py", "modified", 3, 0, PATCH),)
        live.github.set_permission(SHOP, "Codertocat", "write")
        live.github.add_pull(SHOP, "Add sub", user="Codertocat", head="feature", files=files)
        first_head = live.github.repos[SHOP].pulls[1].head_sha
        _earlier_review(live, first_head)
        fixed = (PullFile("calc.py", "modified", 3, 0, FIXED_PATCH),)
        change = PullFile(
            "calc.py", "modified", 1, 1, "@@ -6 +6 @@\n-    return a - a\n+    return a - b\n"
        )
        live.github.push_to_pull(SHOP, 1, NEW_HEAD, fixed, changed=(change,))
        await live.send_github("pull_request", _pushed(live), delivery_id="push-1", times=2)
        db = Database.from_url(db_url)
        task = await _ended_review(db)
        await _until_replied(live)
        db.close()
    assert task.status == "succeeded", task.result
    reviews = live.github.reviews_of(SHOP, 1)
    assert [(r.review_id == EARLIER_REVIEW, r.commit_id) for r in reviews] == [
        (True, first_head),
        (False, NEW_HEAD),
    ]
    assert "Since the last review" in reviews[1].body
    comments = live.github.repos[SHOP].review_comments.values()
    repeated = [c for c in comments if c.review_id == reviews[1].review_id]
    assert repeated == []  # the fixed finding is answered in its thread, not posted again
    [answer] = [c for c in comments if c.in_reply_to == FINDING]
    assert f"Fixed in {NEW_HEAD}." in answer.body and answer.user.login == "keel-bot"
