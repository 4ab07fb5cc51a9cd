"""The executor's driver-level statements read and write what the ORM does, on both engines."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import event

from runtime.errors import StaleWrite
from runtime.execution import Activation, Failure, RunState
from runtime.leases import Claimed
from runtime.scheduler import Scheduler
from runtime.store import executions, task_changes, tool_calls, transcripts
from runtime.store import tasks as q
from runtime.store.engine import Database, Transaction
from runtime.store.executions import Run
from runtime.store.models import ToolCallRow, TranscriptItemRow
from runtime.store.records import Lease, Task
from tests.factories import make_spec
from tests.harness import schedule_task

NOW = datetime(2026, 12, 3, 10, 30, 15, 123456, tzinfo=UTC)
# Nested JSON and datetimes in the state column survive the driver path both ways.
STATE = RunState(
    system="be brief",
    error=Failure("call_model", "boom", "ValueError", "trace"),
    activation=Activation(2, NOW, 1),
    idle_until=NOW,
)


async def _claimed(database: Database, scheduler: Scheduler) -> tuple[Task, Lease, Run]:
    """A new task, claimed: its lease and its run as the claim left it."""
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    claimed = await scheduler.leases.claim_next("w")
    assert isinstance(claimed, Claimed)
    run = database.read_sync(lambda s: executions.load_run(s, task.task_id))
    assert run is not None
    return task, claimed.lease, run


async def _task_id(database: Database) -> str:
    return str((await schedule_task(database)).task_id)


async def test_transcript_items_round_trip_when_written_and_read_on_the_driver_path(
    database: Database,
) -> None:
    task_id = await _task_id(database)
    payload = {"type": "user_text", "text": "naïve – ✓ \"quoted\" 100%", "n": [1, None, 2.5]}
    items = [
        transcripts.NewItem("a", "user", "message", payload),
        transcripts.NewItem("b", "tool", "x", {}),
    ]
    database.run_sync(lambda s: transcripts.add_transcript_items(s, task_id, items, NOW))
    # The same key again is a no-op: the first payload stays.
    again = [transcripts.NewItem("a", "user", "message", {"text": "second"})]
    database.run_sync(lambda s: transcripts.add_transcript_items(s, task_id, again, NOW))

    entries = database.read_sync(lambda s: transcripts.transcript(s, task_id))
    orm = database.read_sync(
        lambda s: [
            (r.item_seq, r.payload, r.created_at)
            for r in s.query(TranscriptItemRow).filter_by(task_id=task_id).order_by("id")
        ]
    )
    assert [(e.seq, e.payload, e.created_at) for e in entries] == orm
    assert [e.item_key for e in entries] == ["a", "b"]
    assert entries[0].payload == payload
    assert entries[0].created_at == NOW
    later = database.read_sync(lambda s: transcripts.transcript(s, task_id, after=entries[0].seq))
    assert [e.item_key for e in later] == ["b"]


async def test_tool_call_lifecycle_matches_the_orm_when_run_on_the_driver_path(
    database: Database,
) -> None:
    task_id = await _task_id(database)
    calls = [tool_calls.NewCall(f"c{i}", 0, i, "lookup", {"q": i}, "read") for i in range(3)]
    deadline = NOW + timedelta(seconds=30)

    def lifecycle(session: Transaction) -> tuple[bool, bool]:
        tool_calls.add_tool_calls(session, task_id, calls)
        tool_calls.mark_dispatching(session, task_id, ["c0", "c1"], deadline, NOW)
        first = tool_calls.settle(
            session,
            task_id,
            "c0",
            outcome="ok",
            result={"output": "found", "is_error": False},
            now=NOW,
        )
        late = tool_calls.settle(
            session,
            task_id,
            "c0",
            outcome="ok",
            result={"output": "late"},
            now=NOW,
        )
        return first, late

    assert database.run_sync(lifecycle) == (True, False)
    records = database.read_sync(lambda s: tool_calls.calls_of_turn(s, task_id, 0))
    rows = database.read_sync(
        lambda s: {r.call_id: r for r in s.query(ToolCallRow).filter_by(task_id=task_id)}
    )
    assert [r.call_id for r in records] == ["c0", "c1", "c2"]
    for record in records:
        row = rows[record.call_id]
        assert (record.dispatch_state, record.deadline_at, record.dispatched_at) == (
            row.dispatch_state,
            row.deadline_at,
            row.dispatched_at,
        )
        assert (record.result, record.settled_at, record.late_reports) == (
            row.result,
            row.settled_at,
            row.late_reports,
        )
    c0, c1, c2 = records
    assert (c0.dispatch_state, c0.result, c0.late_reports) == (
        "settled",
        {"output": "found", "is_error": False},
        1,
    )
    assert (c1.dispatch_state, c1.deadline_at, c1.settled_at) == ("dispatching", deadline, None)
    assert (c2.dispatch_state, c2.args, c2.dispatched_at) == ("pending", {"q": 2}, None)


async def test_task_reads_match_the_orm_record_and_see_later_changes(
    database: Database, scheduler: Scheduler
) -> None:
    task = (await scheduler.transact(scheduler.schedule, make_spec())).task
    read = database.read_sync(lambda s: q.read_task(s, task.task_id))
    assert read == task
    await scheduler.transact(scheduler.request_cancel, task.task_id, "stop", "someone")
    refreshed = database.read_sync(lambda s: task_changes.refresh_task(s, task))
    assert refreshed is not None and refreshed.cancel_requested_at is not None
    assert refreshed == database.read_sync(lambda s: q.read_task(s, task.task_id))
    assert database.read_sync(lambda s: q.read_task(s, "missing")) is None


async def test_transition_commits_once_and_a_stale_version_changes_nothing(
    database: Database, scheduler: Scheduler,
) -> None:
    task, lease, run = await _claimed(database, scheduler)

    def advance(session: Transaction) -> int:
        advance = executions.Advance("check_scheduler", 2, 1, STATE, NOW)
        return executions.commit_transition(session, run, lease.lease_id, advance)

    assert database.run_sync(advance) == run.version + 1
    with pytest.raises(StaleWrite):
        database.run_sync(advance)
    after = database.read_sync(lambda s: executions.load_run(s, task.task_id))
    assert after is not None
    assert (after.phase, after.turn, after.mailbox_position, after.version) == (
        "check_scheduler",
        2,
        1,
        run.version + 1,
    )
    assert after.state == STATE


async def test_cursor_listeners_still_see_the_driver_path_statements(database: Database) -> None:
    task_id = await _task_id(database)
    seen: list[str] = []

    def grab(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement)

    event.listen(database.engine, "before_cursor_execute", grab)
    try:
        database.read_sync(lambda s: transcripts.transcript(s, task_id))
        database.run_sync(lambda s: transcripts.add_transcript_items(s, task_id, [], NOW))
        items = [transcripts.NewItem("k", "user", "message", {"text": "x"})]
        database.run_sync(lambda s: transcripts.add_transcript_items(s, task_id, items, NOW))
    finally:
        event.remove(database.engine, "before_cursor_execute", grab)
    assert any(s.startswith("SELECT") and "transcript_items" in s for s in seen)
    assert any(s.startswith("INSERT INTO transcript_items") for s in seen)


async def test_a_batch_inserts_in_order_once_each_even_with_repeated_keys(
    database: Database,
) -> None:
    """A batch of rows (one statement of several ``VALUES`` tuples on PostgreSQL) keeps the
    order given, and a key already stored, or repeated in the batch, is inserted once."""
    task_id = await _task_id(database)
    first = [transcripts.NewItem(k, "user", "message", {"n": k}) for k in ("a", "b")]
    database.run_sync(lambda s: transcripts.add_transcript_items(s, task_id, first, NOW))
    batch = [
        transcripts.NewItem(k, "tool", "x", {"n": f"{k}{n}"})
        for n, k in enumerate(["c", "a", "d", "c", "e", "f", "g"])
    ]
    database.run_sync(lambda s: transcripts.add_transcript_items(s, task_id, batch, NOW))
    entries = database.read_sync(lambda s: transcripts.transcript(s, task_id))
    assert [(e.item_key, e.payload["n"]) for e in entries] == [
        ("a", "a"), ("b", "b"), ("c", "c0"), ("d", "d2"), ("e", "e4"), ("f", "f5"), ("g", "g6"),
    ]
    assert [e.seq for e in entries] == sorted(e.seq for e in entries)


def test_only_a_single_row_insert_is_batched_as_one_statement() -> None:
    from sqlalchemy.dialects import postgresql

    from runtime.store.prepared import _compile

    dialect = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]
    insert = _compile(transcripts._ADD_ITEMS._make("postgresql"), dialect)
    batched = insert.multi_row(3)
    assert batched is not None and batched.count("%(v_item_key__2)s") == 1
    assert "%(v_item_key)s" not in batched and batched.endswith(insert.sql.split(")")[-1])
    update = _compile(tool_calls._marking(3)._make("postgresql"), dialect)
    assert update.multi_row(3) is None


async def test_advance_and_refresh_reads_the_task_as_the_commit_leaves_it(
    database: Database, scheduler: Scheduler,
) -> None:
    """The lease holder's commit answers with what others changed on the task (a stop here),
    in the transition's own statement on PostgreSQL, and a stale version still changes
    nothing."""
    task, lease, run = await _claimed(database, scheduler)
    await scheduler.transact(scheduler.request_cancel, task.task_id, "stop", "someone")
    advance = executions.Advance("check_scheduler", 1, 0, STATE, NOW)
    seen: list[str] = []

    def grab(conn: Any, cursor: Any, statement: str, *_: Any) -> None:
        seen.append(statement.split()[0])

    event.listen(database.engine, "before_cursor_execute", grab)
    try:
        fresh = database.run_sync(
            lambda s: task_changes.advance_and_refresh(s, run, lease.lease_id, task, advance)
        )
    finally:
        event.remove(database.engine, "before_cursor_execute", grab)
    assert fresh is not None and fresh.cancel_requested_at is not None
    assert fresh == database.read_sync(lambda s: q.read_task(s, task.task_id))
    expected = ["UPDATE"] if database.is_postgres else ["UPDATE", "SELECT"]
    assert [s for s in seen if s in ("UPDATE", "SELECT")] == expected
    with pytest.raises(StaleWrite):
        database.run_sync(
            lambda s: task_changes.advance_and_refresh(s, run, lease.lease_id, task, advance)
        )
    after = database.read_sync(lambda s: executions.load_run(s, task.task_id))
    assert after is not None
    assert (after.phase, after.version) == ("check_scheduler", run.version + 1)
