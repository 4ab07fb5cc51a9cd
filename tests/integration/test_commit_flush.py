"""Which commits wait for the write-ahead log to reach disk, and where transactions run.

On PostgreSQL an executor transition and a claim commit without waiting for the flush: if a
crash of the database server loses one, the run does that phase again (or the delivery is
claimed again). A commit that comes before something outside the database still waits: the
mark before a tool runs, the tool's settlement, a webhook's intake, the outbox's mark before
a post. The log is written in order, so such a commit makes every earlier one durable too.

A ``keel worker`` running one task at a time runs its transactions on its event loop's
thread (``Database.run_on_loop``); ``keel serve`` and busier workers hand them to threads.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, text

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.scheduler import Scheduler
from runtime.store.engine import Database, Transaction
from runtime.store.records import TaskStatus
from tests.factories import make_spec
from tests.harness import agent, build_stack

UNFLUSHED = "SET LOCAL synchronous_commit TO off"


def _setting(session: Transaction) -> str:
    return str(session.execute(text("SHOW synchronous_commit")).scalar())


async def test_an_unflushed_transaction_commits_and_one_that_fails_leaves_nothing(
    database: Database,
) -> None:
    alone = Database(database.engine, threads=1)  # one connection for every transaction
    scheduler = Scheduler(alone)
    try:
        kept = await alone.run(lambda s: scheduler.schedule(s, make_spec()), flush=False)

        def schedule_then_fail(session: Transaction) -> None:
            lost.append(scheduler.schedule(session, make_spec()).task.task_id)
            raise ValueError("after the insert")

        lost: list[str] = []
        with pytest.raises(ValueError, match="after the insert"):
            await alone.run(schedule_then_fail, flush=False)
        assert await scheduler.get(kept.task.task_id) is not None
        assert await scheduler.get(lost[0]) is None
        if alone.is_postgres:
            # This transaction alone skips the wait; the connection is as before afterwards.
            assert await alone.run(_setting, flush=False) == "off"
            assert await alone.run(_setting) == "on"
            assert await alone.read(_setting) == "on"
            with pytest.raises(ValueError):
                await alone.run(schedule_then_fail, flush=False)
            assert await alone.run(_setting) == "on"
    finally:
        alone.close()


Transactions = list[list[str]]


def _record_transactions(database: Database) -> Transactions:
    """Each committed transaction's statements, in commit order."""
    committed: Transactions = []
    open_ones: dict[int, list[str]] = {}

    def begin(conn: Any) -> None:
        open_ones[id(conn)] = []

    def statement(conn: Any, _cursor: Any, sql: str, *_: Any) -> None:
        if id(conn) in open_ones:
            open_ones[id(conn)].append(sql)

    def commit(conn: Any) -> None:
        committed.append(open_ones.pop(id(conn), []))

    event.listen(database.engine, "begin", begin)
    event.listen(database.engine, "before_cursor_execute", statement)
    event.listen(database.engine, "commit", commit)
    return committed


async def test_transitions_skip_the_flush_and_the_marks_around_a_tool_keep_it(
    db_url: str, tmp_path: Path
) -> None:
    script = {
        "scripts": [
            {
                "turns": [
                    {"tool_calls": [{"name": "create_thing", "args": {"title": "v2"}}]},
                    {"say": "created"},
                ]
            }
        ]
    }
    stack = build_stack(db_url, tmp_path, script, agents={"default": agent(["create_thing"])})
    if not stack.db.is_postgres:
        stack.db.close()
        pytest.skip("PostgreSQL's: SQLite's group commit syncs every commit it shares")
    committed = _record_transactions(stack.db)
    try:
        task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
        finished = await stack.run_until_terminal(task.task_id)
    finally:
        stack.db.close()
    assert finished.status is TaskStatus.succeeded
    assert (tmp_path / "effects.log").read_text().count("\n") == 1

    def unflushed(statements: list[str]) -> bool:
        return any(UNFLUSHED in sql for sql in statements)

    def touches(statements: list[str], prefix: str) -> bool:
        return any(sql.lstrip().startswith(prefix) for sql in statements)

    transitions = [t for t in committed if touches(t, "UPDATE executions SET phase")]
    around_tool = [t for t in committed if touches(t, "UPDATE tool_calls SET dispatch_state")]
    claims = [t for t in committed if touches(t, "UPDATE deliveries SET consumed_at")]
    assert len(transitions) >= 6 and len(around_tool) == 2 and claims
    assert all(unflushed(t) for t in transitions + claims)
    assert not any(unflushed(t) for t in around_tool)  # the dispatch mark and the settlement


@pytest.mark.parametrize(
    ("intake", "concurrency", "on_loop"),
    [(False, 1, True), (False, 3, False), (True, 1, False)],
    ids=["keel-worker-one-task", "keel-worker-three-tasks", "keel-serve"],
)
async def test_only_a_worker_running_one_task_at_a_time_keeps_transactions_on_its_loop(
    db_url: str, tmp_path: Path, intake: bool, concurrency: int, on_loop: bool
) -> None:
    tree = {
        "database": {"url": db_url},
        "workspace": {"root": str(tmp_path / "ws")},
        "worker": {"concurrency": concurrency},
    }
    keel = Keel(build_config(tree, env={}))
    keel.migrate()
    await keel.connect()
    await keel.start(workers=True, intake=intake)
    try:
        ran_on = await keel.db.run(lambda s: threading.get_ident())
        read_on = await keel.db.read(lambda s: threading.get_ident())
    finally:
        await keel.stop()
    here = threading.get_ident()
    expected = on_loop and keel.db.is_postgres  # SQLite keeps its committer and threads
    assert (ran_on == here, read_on == here) == (expected, expected)
