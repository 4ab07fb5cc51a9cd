"""The completion headline is only as confident as the evidence and call outcomes behind it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runtime.clock import ManualClock
from runtime.evidence import EvidenceItem, Strength
from runtime.reporting import ReportingPolicy, ThreadReporter, completion_text
from runtime.scheduler import Scheduler
from runtime.store import ledger, outbox, tool_calls
from runtime.store.engine import Database
from runtime.store.records import Task, TaskResult, TaskStatus
from tests.factories import make_spec

COMMIT = {"sha": "abc1234", "branch": "b"}
PUSHED = EvidenceItem("commit", "abc", Strength.provider_read_back, COMMIT)
LOCAL = EvidenceItem("commit", "abc", Strength.tool_reported, COMMIT)
PR = EvidenceItem("pull_request", "r#1", Strength.provider_read_back, {"number": 1, "url": "u"})
GREEN = EvidenceItem("ci_run", "r@abc", Strength.verified, {"sha": "abc1234", "checks": [1]})
RED = EvidenceItem("ci_run", "r@abc", Strength.provider_read_back, {"conclusion": "failure"})
OK = TaskResult(TaskStatus.succeeded, "fixed")


@pytest.mark.parametrize(
    ("result", "evidence", "uncertain", "refused", "headline"),
    [
        (OK, [LOCAL, PUSHED, PR, GREEN], [], [], "✅"),
        (OK, [], [], [], "✅"),  # an answer with no artifacts claims nothing
        (OK, [PUSHED, PR], ["git_push"], [], "⚠️"),
        (OK, [PUSHED], [], ["open_pull_request"], "⚠️"),
        (OK, [LOCAL], [], [], "⚠️"),  # a commit nobody read back from the remote
        (OK, [PUSHED, PR, RED], [], [], "⚠️"),
        (TaskResult(TaskStatus.failed, "broke"), [PUSHED, PR, GREEN], [], [], "❌"),
    ],
)
def test_headline_follows_the_evidence(
    result: TaskResult,
    evidence: list[EvidenceItem],
    uncertain: list[str],
    refused: list[str],
    headline: str,
) -> None:
    text = completion_text(result, evidence, uncertain, refused=refused)
    assert text.startswith(headline), text


async def test_interrupted_push_and_refused_pr_never_read_as_done(database: Database) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock)
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    database.run_sync(lambda s: _record_calls(s, task, clock))
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_finished(s, task, OK))
    [post] = [
        p
        for p in database.run_sync(lambda s: outbox.posts_of_task(s, task.task_id))
        if p.purpose == "completion"
    ]
    first, *rest = post.body.splitlines()
    assert first.startswith("⚠️") and "✅" not in post.body
    body = "\n".join(rest)
    assert "git_push was interrupted" in body
    assert "open_pull_request did not succeed" in body


def _record_calls(session: Any, task: Task, clock: ManualClock) -> None:
    calls: list[tuple[str, str, str, dict[str, Any]]] = [
        ("c1", "git_commit", "ok", {"output": "committed abc1234"}),
        ("c2", "git_push", "interrupted", {"output": "worker died", "is_error": True}),
        ("c3", "open_pull_request", "error", {"output": "GitHub refused", "is_error": True}),
    ]
    for idx, (call_id, name, outcome, result) in enumerate(calls):
        tool_calls.add_tool_call(
            session, task.task_id, call_id, turn=1, idx=idx, name=name, args={}, effect="write"
        )
        tool_calls.settle(
            session, task.task_id, call_id, outcome=outcome, result=result, now=clock.now()
        )
    ledger.add_evidence(session, task.task_id, task.root_id, "c1", LOCAL, clock.now())


@pytest.mark.parametrize("public_url", ["https://keel.example.com/", None])
async def test_completion_links_the_task_page_when_public_url_is_set(
    database: Database, public_url: str | None
) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock)
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    reporter = ThreadReporter(clock, ReportingPolicy(public_url=public_url))
    database.run_sync(lambda s: reporter.on_finished(s, task, OK))
    [post] = [
        p
        for p in database.run_sync(lambda s: outbox.posts_of_task(s, task.task_id))
        if p.purpose == "completion"
    ]
    link = f"https://keel.example.com/ui/tasks/{task.task_id}"
    if public_url:
        assert post.body.endswith(f"Task details: {link}")
    else:
        assert "Task details" not in post.body and "/ui/tasks/" not in post.body


def test_server_public_url_reaches_the_reporter(db_url: str, tmp_path: Path) -> None:
    from adapters.assembly import Keel
    from adapters.config import build_config

    tree = {
        "database": {"url": db_url},
        "server": {"public_url": "https://keel.example.com"},
        "workspace": {"root": str(tmp_path / "ws")},
    }
    keel = Keel(build_config(tree, env={}))
    try:
        assert keel.reporting.task_link("t1") == "https://keel.example.com/ui/tasks/t1"
    finally:
        keel.db.close()
