"""The outbox: each post lands once, edits are rate-limited, a dead origin falls back."""

from __future__ import annotations

from dataclasses import dataclass, field

from runtime.clock import ManualClock
from runtime.errors import Permanent, Retryable
from runtime.evidence import EvidenceItem, Strength
from runtime.outbox import Fallback, OutboxDispatcher
from runtime.reporting import ThreadReporter, completion_text, progress_key
from runtime.scheduler import Scheduler
from runtime.store import outbox, runs
from runtime.store.engine import Database
from runtime.store.records import TaskResult, TaskStatus
from runtime.surfaces import PostedRef
from tests.factories import make_spec


@dataclass
class FakeSurface:
    """A surface at our own port that records what it was asked to do."""

    name: str = "slack"
    posts: list[tuple[str, str, str]] = field(default_factory=list)
    updates: list[tuple[str, str]] = field(default_factory=list)
    fail_with: Exception | None = None
    lose_response_once: bool = False

    async def post(self, thread_ref: str, text: str, *, key: str) -> PostedRef:
        if self.fail_with is not None:
            raise self.fail_with
        self.posts.append((thread_ref, text, key))
        if self.lose_response_once:
            self.lose_response_once = False
            raise Retryable("response lost")
        return PostedRef(self.name, f"C1:{len(self.posts)}")

    async def find_post(self, thread_ref: str, *, key: str) -> PostedRef | None:
        for index, (_, _, posted_key) in enumerate(self.posts, start=1):
            if posted_key == key:
                return PostedRef(self.name, f"C1:{index}")
        return None

    async def update(self, posted: PostedRef, text: str) -> None:
        self.updates.append((posted.ref, text))

    async def react(self, thread_ref: str, emoji: str) -> None:
        self.posts.append((thread_ref, f":{emoji}:", "react"))


async def _task(db: Database) -> str:
    return (await Scheduler(db).schedule(make_spec())).task.task_id


def _queue(db: Database, task_id: str, key: str, body: str, clock: ManualClock) -> None:
    db.run_sync(
        lambda s: outbox.enqueue_post(
            s,
            task_id=task_id,
            purpose="completion",
            surface="slack",
            thread_ref="slack:T1/C1/1.0",
            key=key,
            action="post",
            body=body,
            now=clock.now(),
        )
    )


async def test_post_lands_once_when_response_is_lost_and_retried(database: Database) -> None:
    clock = ManualClock()
    surface = FakeSurface(lose_response_once=True)
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock)
    task_id = await _task(database)
    for _ in range(2):
        _queue(database, task_id, "k1", "hello", clock)  # queued twice: one row
    await dispatcher.run_once()
    clock.advance(5)
    await dispatcher.run_once()
    clock.advance(5)
    await dispatcher.run_once()
    assert [p[1] for p in surface.posts] == ["hello"]  # reconciled by key, not reposted
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert row.state == "landed" and row.landed_on == "slack:C1:1"


async def test_progress_edits_are_rate_limited_when_phases_change_quickly(
    database: Database,
) -> None:
    clock = ManualClock()
    surface = FakeSurface()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock, edit_interval_s=3)
    scheduler = Scheduler(database, clock=clock)
    task = (await scheduler.schedule(make_spec())).task
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    await dispatcher.run_once()
    for step in ("a", "b", "c"):
        database.run_sync(lambda s, step=step: reporter.on_phase(s, task, "x", step))
        clock.advance(1)
        await dispatcher.run_once()
    assert len(surface.posts) == 1  # one progress message
    assert len(surface.updates) == 1  # edited once within 3 s, with the latest text
    assert surface.updates[0][1].endswith("c") or surface.updates[0][1].endswith("b")
    clock.advance(3)
    await dispatcher.run_once()
    assert surface.updates[-1][1].endswith("c")
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task.task_id))
    assert row.key == progress_key(task.task_id)


async def test_completion_goes_to_fallback_when_origin_fails_permanently(
    database: Database,
) -> None:
    clock = ManualClock()
    origin = FakeSurface(fail_with=Permanent("channel_not_found"))
    fallback = FakeSurface(name="github")
    dispatcher = OutboxDispatcher(
        database,
        {"slack": origin, "github": fallback},
        clock,
        fallback=Fallback("github", "github:acme/ops#1"),
    )
    task_id = await _task(database)
    _queue(database, task_id, "k2", "the result", clock)
    await dispatcher.run_once()
    [(thread, text, _)] = fallback.posts
    assert thread == "github:acme/ops#1" and "channel_not_found" in text and "the result" in text
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert row.state == "landed" and row.landed_on == "fallback:github:C1:1"


def test_completion_text_claims_only_what_the_ledger_holds() -> None:
    evidence = [
        EvidenceItem("commit", "abc", Strength.tool_reported, {"sha": "abc1234def", "branch": "b"}),
        EvidenceItem("commit", "abc", Strength.provider_read_back, {"sha": "abc1234def"}),
        EvidenceItem(
            "ci_run",
            "r@abc",
            Strength.verified,
            {"sha": "abc1234def", "checks": [1, 2, 3], "failed": []},
        ),
    ]
    text = completion_text(TaskResult(TaskStatus.succeeded, "fixed"), evidence, ["git_push"])
    assert text.count("Commit abc1234") == 1 and "read back from the provider" in text
    assert "CI: 3/3 checks passed on abc1234 — verified" in text
    assert "git_push was interrupted" in text
    bare = completion_text(TaskResult(TaskStatus.succeeded, "fixed"), [], [])
    assert "nothing here is verified" in bare and "PR" not in bare


async def test_daemon_no_op_stays_silent(database: Database) -> None:
    clock = ManualClock()
    scheduler = Scheduler(database, clock=clock)
    task = (await scheduler.schedule(make_spec(objective_key="daemon:ci-fixer"))).task
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    result = TaskResult(TaskStatus.succeeded, "nothing to do")
    database.run_sync(lambda s: reporter.on_finished(s, task, result))
    assert database.run_sync(lambda s: outbox.posts_of_task(s, task.task_id)) == []
    assert database.run_sync(lambda s: runs.evidence_of_tree(s, task.root_id)) == []
