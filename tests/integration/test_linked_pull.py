"""A pull request a task opened is linked to the task's objective: through Keel's real app
and the GitHub emulator, with corpus payloads, its inline review comments from people who
may write reach the task without a mention (once, however often delivered), a reviewer
below min_permission reaches nothing, a failing check on the current head is one follow-up
per (check, SHA), a check on an older head is ignored, and after the task ended a review
comment starts one task of the same objective, answered on the pull request."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from adapters.emulators.corpus import load_github_example
from runtime.evidence import EvidenceItem, Strength
from runtime.scheduler import Scheduler
from runtime.store import links
from runtime.store import tasks as q
from runtime.store.engine import Database
from runtime.store.models import OutboxRow, SignalRow, TaskRow
from runtime.store.records import TaskResult, TaskStatus
from runtime.threads import text_of
from tests.integration.keel_live import CHANNEL, GH_REPO, Live, live_keel

HEAD = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"  # the corpus check run's head
OLD = "1" * 40
PULL = 2  # the corpus review comment's pull request
EXTRA = {"github": {"min_permission": "write"}}


def _review_comment(
    comment_id: int, login: str = "Codertocat", pull: int = PULL
) -> dict[str, Any]:
    return load_github_example(
        "pull_request_review_comment/created",
        **{
            "comment.id": comment_id,
            "comment.body": "This should handle the empty cart too.",
            "sender.login": login,
            "pull_request.number": pull,
        },
    )


def _changes_requested(review_id: int, pull: int = PULL) -> dict[str, Any]:
    return load_github_example(
        "pull_request_review/submitted",
        **{
            "review.id": review_id,
            "review.state": "changes_requested",
            "review.body": "Please cover the empty cart before merging.",
            "pull_request.number": pull,
        },
    )


def _check(sha: str, conclusion: str = "failure") -> dict[str, Any]:
    return load_github_example(
        "check_run/completed",
        **{
            "check_run.head_sha": sha,
            "check_run.conclusion": conclusion,
            "check_run.output.title": "2 tests failed",
            "check_run.output.summary": "test_checkout_empty_cart: AssertionError",
            "check_run.check_suite.head_sha": sha,
        },
    )


async def _mailbox(db: Database, task_id: str) -> list[str]:
    messages = await Scheduler(db).read_mailbox(task_id)
    return [m.text for m in messages]


async def _task_with_pull(live: Live, db: Database, pull: int = PULL) -> tuple[str, str]:
    """A Slack task (no workers: it stays queued) whose pull request is linked as when its
    open_pull_request call settles."""
    mention = live.mention("please fix the checkout for empty carts")
    await live.send_slack(mention)
    objective = f"slack:{live.slack.team_id}/{CHANNEL}/{mention['ts']}"
    task = await db.read(lambda s: q.latest_by_objective(s, objective))
    assert task is not None
    item = EvidenceItem(
        "pull_request",
        f"https://github.com/{GH_REPO}/pull/{pull}",
        Strength.provider_read_back,
        {"repo": GH_REPO, "number": pull, "head_ref": "keel/fix", "head_sha": OLD},
    )
    pushed = EvidenceItem(
        "commit",
        HEAD,
        Strength.provider_read_back,
        {"sha": HEAD, "branch": "keel/fix", "pushed": True},
    )
    now = datetime.now(UTC)

    def write(session: Any) -> None:
        links.record_evidence(session, task.task_id, task.root_id, item, now)
        links.record_evidence(session, task.task_id, task.root_id, pushed, now)  # head moves

    await db.run(write)
    return task.task_id, objective


async def _decisions(db: Database) -> list[tuple[str, str | None]]:
    rows = await db.read(lambda s: list(s.query(SignalRow).order_by(SignalRow.signal_id)))
    return [(r.decision, r.reason) for r in rows if r.provider == "github"]


async def test_reviews_and_head_checks_of_a_linked_pull_request_reach_its_task(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path, db_url, extra=EXTRA) as live:
        live.github.add_user("mallory")
        live.github.set_permission(GH_REPO, "mallory", "read")
        task_id, objective = await _task_with_pull(live, db)

        comment = _review_comment(9001)
        await live.send_github("pull_request_review_comment", comment, delivery_id="d-1", times=2)
        await live.send_github(
            "pull_request_review_comment", comment, delivery_id="d-1b"
        )  # another delivery of the same comment
        await live.send_github("pull_request_review_comment", _review_comment(9002, "mallory"))
        await live.send_github("check_run", _check(HEAD), delivery_id="c-1")
        await live.send_github("check_run", _check(HEAD), delivery_id="c-2")  # failed again
        await live.send_github("check_run", _check(OLD), delivery_id="c-3")  # an older head
        await live.send_github("check_run", _check(HEAD, "success"), delivery_id="c-4")

        # A person's GitHub delivery is routed off the request path, once its asker's
        # permission is known: wait for both follow-ups and the refusal.
        async with asyncio.timeout(30):
            while len(await _mailbox(db, task_id)) < 2 or len(await _decisions(db)) < 7:
                await asyncio.sleep(0.1)
        said = await _mailbox(db, task_id)
        assert len(said) == 2
        assert said[0] == "This should handle the empty cart too."
        assert said[1].startswith(f"Octocoders-linter: failure on {HEAD}")
        assert "2 tests failed" in said[1] and "AssertionError" in said[1]
        decisions = await _decisions(db)
        assert decisions.count(("append", None)) == 2
        assert ("drop", "unauthorised") in decisions

        # Once the task ended, a review comment starts one task of the same objective,
        # whose replies go to the pull request.
        ended = TaskResult(TaskStatus.succeeded, "opened PR #2", {})
        scheduler = Scheduler(db)
        await scheduler.transact(scheduler.report_result, task_id, ended)
        later = _review_comment(9003)
        await live.send_github("pull_request_review_comment", later, delivery_id="d-3", times=2)
        async with asyncio.timeout(30):
            while (
                successor := await db.read(lambda s: q.latest_by_objective(s, objective))
            ) is None or successor.task_id == task_id:
                await asyncio.sleep(0.1)
    db.close()
    assert successor is not None and successor.task_id != task_id
    assert successor.status == "queued"
    assert text_of(successor.origin_thread_ref) == f"github:{GH_REPO}#{PULL}"


async def test_ci_follow_ups_stop_at_the_cap_with_one_honest_reply_on_the_pull_request(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    extra = {**EXTRA, "routing": {"max_ci_fixes": 1}}
    with live_keel(tmp_path, db_url, extra=extra) as live:
        task_id, _ = await _task_with_pull(live, db)
        for n, name in enumerate(["tests", "lint", "types"]):
            failed = _check(HEAD)
            failed["check_run"]["name"] = name
            await live.send_github("check_run", failed, delivery_id=f"c-{n}", times=2)
        said = await _mailbox(db, task_id)
        rows = await db.read(lambda s: list(s.query(OutboxRow).filter_by(purpose="ci_cap")))
        decisions = await _decisions(db)
    db.close()
    assert len(said) == 1 and said[0].startswith("tests: failure")
    assert decisions.count(("drop", "capped")) == 2
    [cap] = rows
    assert cap.thread_ref == f"github:{GH_REPO}#{PULL}"
    assert "not trying again" in cap.body and "lint: failure" in cap.body


async def test_a_push_moves_the_linked_head_and_a_second_link_keeps_the_first_owner(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    first = links.PullLink("acme/shop", 7, "slack:T/C/1", "t_1", "keel/fix", "a" * 40)
    second = links.PullLink("acme/shop", 7, "slack:T/C/2", "t_2", "keel/fix", "b" * 40)

    def write(session: Any) -> None:
        links.link_pull(session, first, now)
        links.link_pull(session, second, now)  # found again by another task: the head moves
        links.move_head(session, "slack:T/C/1", "keel/fix", "c" * 40, now)
        links.move_head(session, "slack:T/C/1", "other", "d" * 40, now)  # not its branch

    await database.run(write)
    link = await database.read(lambda s: links.pull_link(s, "acme/shop", 7))
    old = await database.read(lambda s: links.link_of_head(s, "acme/shop", "a" * 40))
    assert link is not None and (link.objective_key, link.task_id) == ("slack:T/C/1", "t_1")
    assert link.head_sha == "c" * 40 and old is None
    item = EvidenceItem("commit", "e" * 40, Strength.tool_reported, {"sha": "e" * 40})
    await database.run(lambda s: links.record_evidence(s, "t_missing", "t_missing", item, now))
    assert (await database.read(lambda s: links.pull_link(s, "acme/shop", 7))) == link


def _pull_comments(live: Live, number: int, containing: str) -> list[str]:
    repo = live.github.repos[GH_REPO]
    return [
        c.body
        for cid in repo.issues[number].comment_ids
        if containing in (c := repo.comments[cid]).body
    ]


async def _tasks(db: Database) -> int:
    return len(await db.read(lambda s: list(s.query(TaskRow))))


async def test_a_review_comment_below_min_permission_on_a_linked_pull_gets_one_refusal_only(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path, db_url, extra=EXTRA) as live:
        live.github.set_permission(GH_REPO, "mallory", "read")
        pull = live.github.add_pull(GH_REPO, "Fix empty carts", user="keel-bot", head="keel/fix")
        task_id, _ = await _task_with_pull(live, db, pull)
        tasks_before = await _tasks(db)

        comment = _review_comment(9101, "mallory", pull)
        # Delivered twice under one id, once more under another: one refusal between them.
        await live.send_github("pull_request_review_comment", comment, delivery_id="m-1", times=2)
        await live.send_github("pull_request_review_comment", comment, delivery_id="m-2")
        # A second comment of theirs in the same thread: refused once per person and thread.
        again = _review_comment(9102, "mallory", pull)
        await live.send_github("pull_request_review_comment", again, delivery_id="m-3")
        async with asyncio.timeout(30):
            while len(await _decisions(db)) < 3 or not _pull_comments(live, pull, "Sorry"):
                await asyncio.sleep(0.1)
        await live.drained()
        await asyncio.sleep(0.5)  # a second refusal, if one were coming, would be posted now
        decisions = await _decisions(db)
        refusals = _pull_comments(live, pull, "Sorry mallory")
        mailbox = await _mailbox(db, task_id)
        tasks_after = await _tasks(db)
    db.close()
    assert decisions.count(("drop", "unauthorised")) == 2
    assert all(d != ("append", None) and d != ("new_task", None) for d in decisions)
    assert len(refusals) == 1 and "write" in refusals[0]
    assert len(_pull_comments(live, pull, "Sorry")) == 1
    assert mailbox == []
    assert tasks_after == tasks_before


async def test_changes_requested_on_a_linked_pull_is_one_follow_up_without_a_mention(
    db_url: str, tmp_path: Path
) -> None:
    db = Database.from_url(db_url)
    with live_keel(tmp_path, db_url, extra=EXTRA) as live:
        task_id, _ = await _task_with_pull(live, db)
        review = _changes_requested(8001)
        await live.send_github("pull_request_review", review, delivery_id="r-1", times=2)
        await live.send_github("pull_request_review", review, delivery_id="r-2")
        # The same review on a pull request no task opened: dropped, with the reason kept.
        unlinked = _changes_requested(8002, pull=PULL + 40)
        await live.send_github("pull_request_review", unlinked, delivery_id="r-3")
        async with asyncio.timeout(30):
            while len(await _decisions(db)) < 3:
                await asyncio.sleep(0.1)
        await live.drained()
        said = await _mailbox(db, task_id)
        decisions = await _decisions(db)
    db.close()
    assert said == ["Please cover the empty cart before merging."]
    assert decisions.count(("append", None)) == 1
    assert ("drop", "duplicate") in decisions
    assert ("drop", "not_addressed") in decisions
