"""The outbox: each post lands once, edits are rate-limited, a dead origin falls back."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import partial

import pytest

from runtime.clock import ManualClock
from runtime.errors import Permanent, Retryable
from runtime.evidence import EvidenceItem, Strength
from runtime.outbox import OutboxDispatcher
from runtime.reporting import ThreadReporter, completion_text, progress_key
from runtime.scheduler import Scheduler
from runtime.store import ledger, outbox
from runtime.store.engine import Database
from runtime.store.models import OutboxRow
from runtime.store.records import TaskResult, TaskStatus
from runtime.surfaces import Action, Surface
from runtime.threads import GitHubIssue, Landed, SlackThread, ThreadRef
from tests.factories import make_spec
from tests.harness import schedule_task

ORIGIN = SlackThread("T1", "C1", "1.0")


@dataclass
class FakeSurface:
    """A surface at our own port that records what it was asked to do."""

    name: str = "slack"
    posts: list[tuple[ThreadRef, str, str]] = field(default_factory=list)
    updates: list[tuple[ThreadRef, str]] = field(default_factory=list)
    fail_with: Exception | None = None
    lose_response_once: bool = False

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> ThreadRef:
        if self.fail_with is not None:
            raise self.fail_with
        self.posts.append((thread, text, key))
        if self.lose_response_once:
            self.lose_response_once = False
            raise Retryable("response lost")
        return message(thread, len(self.posts))

    async def find_post(self, thread: ThreadRef, *, key: str) -> ThreadRef | None:
        for index, (posted_in, _, posted_key) in enumerate(self.posts, start=1):
            if posted_key == key:
                return message(posted_in, index)
        return None

    async def update(
        self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()
    ) -> None:
        self.updates.append((posted, text))

    async def react(self, target: ThreadRef, emoji: str) -> None:
        self.posts.append((target, f":{emoji}:", "react"))


def message(thread: ThreadRef, n: int) -> ThreadRef:
    """The n-th message posted, named as its surface names it."""
    match thread:
        case SlackThread():
            return thread.message(f"1700000001.{n:06d}")
        case GitHubIssue():
            return thread.comment(n)
        case _:
            raise Permanent(f"nobody can post on {thread}")


async def _task(db: Database) -> str:
    return (await schedule_task(db)).task_id


def _queue(db: Database, task_id: str, key: str, body: str, clock: ManualClock) -> None:
    db.run_sync(
        lambda s: outbox.enqueue_post(
            s,
            task_id=task_id,
            purpose="completion",
            thread=ORIGIN,
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
    assert row.state == "landed" and row.landed_on == Landed(message(ORIGIN, 1))


async def test_progress_edits_are_rate_limited_when_phases_change_quickly(
    database: Database,
) -> None:
    clock = ManualClock()
    surface = FakeSurface()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock, edit_interval_s=3)
    scheduler = Scheduler(database, clock=clock)
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    await dispatcher.run_once()
    for step in ("a", "b", "c"):
        database.run_sync(partial(reporter.on_phase, task=task, phase="x", detail=step))
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
        fallback=GitHubIssue("acme/ops", 1),
    )
    task_id = await _task(database)
    _queue(database, task_id, "k2", "the result", clock)
    await dispatcher.run_once()
    [(thread, text, _)] = fallback.posts
    assert thread == GitHubIssue("acme/ops", 1)
    assert "channel_not_found" in text and "the result" in text
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert row.state == "landed" and row.landed_on == Landed(GitHubIssue("acme/ops", 1, 1), True)


async def test_unreadable_row_fails_alone_with_the_reason_when_others_are_due(
    database: Database,
) -> None:
    clock = ManualClock()
    surface = FakeSurface()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock)
    task_id = await _task(database)
    database.run_sync(lambda s: s.add(_row(task_id, "slack:C1:1.0", "bad", clock)))
    _queue(database, task_id, "good", "still sent", clock)
    await dispatcher.run_once()
    assert [text for _, text, _ in surface.posts] == ["still sent"]
    bad, good = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert isinstance(bad.thread_ref, outbox.Unreadable) and str(bad.thread_ref) == "slack:C1:1.0"
    assert bad.state == "undelivered" and "not a thread reference: 'slack:C1:1.0'" in (
        bad.last_error or ""
    )
    assert good.state == "landed"


def _row(task_id: str, thread_ref: str, key: str, clock: ManualClock) -> OutboxRow:
    return OutboxRow(
        task_id=task_id, purpose="completion", surface="slack", thread_ref=thread_ref,
        idempotency_key=key, action="post", body="never sent", state="pending", attempts=0,
        next_attempt_at=clock.now(), created_at=clock.now(),
    )


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
    spec = make_spec(objective_key="daemon:ci-fixer")
    task = (await scheduler.transact(scheduler.schedule, spec)).task
    reporter = ThreadReporter(clock)
    database.run_sync(lambda s: reporter.on_phase(s, task, "call_model", ""))
    result = TaskResult(TaskStatus.succeeded, "nothing to do")
    database.run_sync(lambda s: reporter.on_finished(s, task, result))
    assert database.run_sync(lambda s: outbox.posts_of_task(s, task.task_id)) == []
    assert database.run_sync(lambda s: ledger.evidence_of_tree(s, task.root_id)) == []


@pytest.mark.parametrize(
    ("origin_name", "origin_ref", "fallback_name", "fallback_ref"),
    [
        ("slack", ORIGIN, "github", GitHubIssue("acme/ops", 1)),
        ("github", GitHubIssue("acme/shop", 7), "slack", SlackThread("T1", "COPS", "1700.1")),
        ("slack", ORIGIN, "slack", SlackThread("T1", "COPS", "1700.1")),
    ],
    ids=["slack-to-github", "github-to-slack", "slack-to-slack"],
)
async def test_post_and_its_later_edits_go_to_the_fallback_surface(
    database: Database,
    origin_name: str,
    origin_ref: ThreadRef,
    fallback_name: str,
    fallback_ref: ThreadRef,
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
    dispatcher = OutboxDispatcher(database, surfaces, clock, fallback=fallback_ref)
    task_id = await _task(database)
    database.run_sync(
        lambda s: outbox.enqueue_post(
            s,
            task_id=task_id,
            purpose="progress",
            thread=origin_ref,
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
    assert edited_ref == message(fallback_ref, 1)
    assert edited.startswith(f"(Could not post in {origin_ref})") and edited.endswith("step 2")
    assert len(fallback.posts) == 1  # no second message
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert row.state == "landed" and row.landed_on == Landed(edited_ref, fallback=True)
    assert str(row.landed_on).startswith(f"fallback:{fallback_name}:")


@dataclass
class _RefusingThread:
    """One surface whose origin thread is gone but whose other threads accept posts."""

    inner: FakeSurface
    refused: ThreadRef
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    async def post(
        self, thread: ThreadRef, text: str, *, key: str, actions: Sequence[Action] = ()
    ) -> ThreadRef:
        if thread == self.refused:
            raise Permanent("channel_not_found")
        return await self.inner.post(thread, text, key=key)

    async def find_post(self, thread: ThreadRef, *, key: str) -> ThreadRef | None:
        if thread == self.refused:
            return None
        return await self.inner.find_post(thread, key=key)

    async def update(self, posted: ThreadRef, text: str, *, actions: Sequence[Action] = ()) -> None:
        await self.inner.update(posted, text)

    async def react(self, target: ThreadRef, emoji: str) -> None:
        await self.inner.react(target, emoji)


@dataclass
class RefusedReactions(FakeSurface):
    """Every reaction fails as Retryable (the provider is down for reactions)."""

    tries: int = 0

    async def react(self, target: ThreadRef, emoji: str) -> None:
        self.tries += 1
        raise Retryable("reactions are down")


def _queue_reaction(db: Database, task_id: str, clock: ManualClock) -> None:
    db.run_sync(
        lambda s: outbox.enqueue_post(
            s,
            task_id=task_id,
            purpose="ack",
            thread=ORIGIN,
            key="ack:s1",
            action="react",
            body="eyes",
            now=clock.now(),
        )
    )


async def test_a_reaction_is_never_marked_sending_and_its_failed_tries_still_count(
    database: Database,
) -> None:
    """A 👀 is idempotent, so it skips the durable "sending" mark; without it the tries must
    still be counted where they fail, or a provider refusing reactions would be asked forever."""
    clock = ManualClock()
    surface = RefusedReactions()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock, deliver_for_s=250)
    task_id = await _task(database)
    _queue_reaction(database, task_id, clock)
    for _ in range(5):
        await dispatcher.run_once()
        [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
        assert row.state in ("pending", "undelivered")
        clock.advance(120)
    assert surface.tries == 4  # at 0, 120 and 240 s, then at 360 s, past its 250 s
    assert row.state == "undelivered" and row.attempts == 3
    assert "after 250 s and 4 attempts" in (row.last_error or "")


async def test_a_reaction_lands_without_a_sending_mark(database: Database) -> None:
    clock = ManualClock()
    surface = FakeSurface()
    dispatcher = OutboxDispatcher(database, {"slack": surface}, clock)
    task_id = await _task(database)
    _queue_reaction(database, task_id, clock)
    assert await dispatcher.run_once() == 1
    [row] = database.run_sync(lambda s: outbox.posts_of_task(s, task_id))
    assert row.state == "landed" and row.attempts == 0
    assert surface.posts == [(ORIGIN, ":eyes:", "react")]
