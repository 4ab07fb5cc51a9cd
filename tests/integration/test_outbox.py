"""The outbox: each post lands once, edits are rate-limited, a dead origin falls back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest

from runtime.clock import ManualClock
from runtime.errors import Permanent, Retryable
from runtime.evidence import EvidenceItem, Strength
from runtime.outbox import Fallback, OutboxDispatcher
from runtime.reporting import ThreadReporter, completion_text, progress_key
from runtime.scheduler import Scheduler
from runtime.store import outbox, runs
from runtime.store.engine import Database
from runtime.store.records import TaskResult, TaskStatus
from runtime.surfaces import Action, PostedRef, Surface
from tests.factories import make_spec


@dataclass
class FakeSurface:
    """A surface at our own port that records what it was asked to do."""

    name: str = "slack"
    posts: list[tuple[str, str, str]] = field(default_factory=list)
    updates: list[tuple[str, str]] = field(default_factory=list)
    fail_with: Exception | None = None
    lose_response_once: bool = False

    async def post(
        self, thread_ref: str, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> PostedRef:
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

    async def update(
        self, posted: PostedRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
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


@pytest.mark.parametrize(
    ("origin_name", "origin_ref", "fallback_name", "fallback_ref"),
    [
        ("slack", "slack:T1/C1/1.0", "github", "github:acme/ops#1"),
        ("github", "github:acme/shop#7", "slack", "slack:T1/COPS/1700000000.000100"),
        ("slack", "slack:T1/C1/1.0", "slack", "slack:T1/COPS/1700000000.000100"),
    ],
    ids=["slack-to-github", "github-to-slack", "slack-to-slack"],
)
async def test_post_and_its_later_edits_go_to_the_fallback_surface(
    database: Database, origin_name: str, origin_ref: str, fallback_name: str, fallback_ref: str
) -> None:
    clock = ManualClock()
    fallback = FakeSurface(name=fallback_name)
    surfaces: dict[str, Surface] = {
        # The origin's thread is gone; on the same surface, other threads still accept posts.
        origin_name: _RefusingThread(fallback, refused=origin_ref)
        if origin_name == fallback_name
        else FakeSurface(name=origin_name, fail_with=Permanent("channel_not_found")),
        **({} if origin_name == fallback_name else {fallback_name: fallback}),
    }
    dispatcher = OutboxDispatcher(
        database, surfaces, clock, fallback=Fallback(fallback_name, fallback_ref)
    )
    task_id = await _task(database)
    database.run_sync(
        lambda s: outbox.enqueue_post(
            s,
            task_id=task_id,
            purpose="progress",
            surface=origin_name,
            thread_ref=origin_ref,
            key="progress-1",
            action="post",
            body="working: step 1",
            now=clock.now(),
        )
    )
    await dispatcher.run_once()
    [(thread, text, _)] = fallback.posts
    assert thread == fallback_ref
    assert text.startswith(f"(Could not post in {origin_ref}: channel_not_found)")
    database.run_sync(lambda s: outbox.set_body(s, "progress-1", "working: step 2"))
    clock.advance(5)
    await dispatcher.run_once()
    [(edited_ref, edited)] = fallback.updates  # edited where it landed, not on the origin
    assert edited_ref == "C1:1"
    assert edited.startswith(f"(Could not post in {origin_ref})") and edited.endswith("step 2")
    assert len(fallback.posts) == 1  # no second message
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert row.state == "landed" and row.landed_on == f"fallback:{fallback_name}:C1:1"


@dataclass
class _RefusingThread:
    """One surface whose origin thread is gone but whose other threads accept posts."""

    inner: FakeSurface
    refused: str

    async def post(
        self, thread_ref: str, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> PostedRef:
        if thread_ref == self.refused:
            raise Permanent("channel_not_found")
        return await self.inner.post(thread_ref, text, key=key)

    async def find_post(self, thread_ref: str, *, key: str) -> PostedRef | None:
        if thread_ref == self.refused:
            return None
        return await self.inner.find_post(thread_ref, key=key)

    async def update(
        self, posted: PostedRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        await self.inner.update(posted, text)

    async def react(self, thread_ref: str, emoji: str) -> None:
        await self.inner.react(thread_ref, emoji)
