"""Property-based test: random scheduler operations never break the lifecycle invariants.

Invariants: a terminal status is final; a task never has two live leases; mailbox seq per
task is 1..n with no gaps and no repeats.
"""

from __future__ import annotations

import asyncio
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule, run_state_machine_as_test
from sqlalchemy import select

from runtime.clock import ManualClock
from runtime.leases import Claimed
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.models import Base, MailboxMessageRow, TaskRow
from runtime.store.records import Lease, TaskResult, TaskStatus
from tests.factories import make_spec, text_part

TERMINALS = [TaskStatus.succeeded, TaskStatus.failed, TaskStatus.canceled, TaskStatus.timed_out]


def _clear(session: Any) -> None:
    for table in reversed(Base.metadata.sorted_tables):
        session.execute(table.delete())


def _machine(database: Database) -> type[RuleBasedStateMachine]:
    class SchedulerMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            database.run_sync(_clear)  # each example starts from an empty database
            self.loop = asyncio.new_event_loop()
            self.clock = ManualClock()
            self.scheduler = Scheduler(database, clock=self.clock, lease_seconds=10)
            self.tasks: list[str] = []
            self.terminal: dict[str, TaskStatus] = {}
            self.held: dict[str, Lease] = {}

        def run(self, coro: Any) -> Any:
            return self.loop.run_until_complete(coro)

        def teardown(self) -> None:
            self.loop.close()

        @rule()
        def schedule_root(self) -> None:
            self.tasks.append(
                self.run(self.scheduler.transact(self.scheduler.schedule, make_spec())).task.task_id
            )

        @rule(data=st.data(), key=st.sampled_from(["a", "b"]))
        def schedule_child(self, data: st.DataObject, key: str) -> None:
            if not self.tasks:
                return
            parent = data.draw(st.sampled_from(self.tasks))
            spec = make_spec(parent_id=parent, child_key=key)
            scheduled = self.run(self.scheduler.transact(self.scheduler.schedule, spec))
            if scheduled.created:
                self.tasks.append(scheduled.task.task_id)

        @rule()
        def claim_next(self) -> None:
            outcome = self.run(self.scheduler.leases.claim_next("w"))
            if isinstance(outcome, Claimed):
                task_id = outcome.task.task_id
                previous = self.held.get(task_id)
                assert previous is None or previous.expires_at <= self.clock.now(), (
                    "a second live lease was granted"
                )
                self.held[task_id] = outcome.lease

        @rule(data=st.data(), tick=st.booleans())
        def release(self, data: st.DataObject, tick: bool) -> None:
            if not self.held:
                return
            task_id = data.draw(st.sampled_from(sorted(self.held)))
            lease = self.held.pop(task_id)
            at = self.clock.now() if tick else None
            self.run(self.scheduler.db.run(lambda s: self.scheduler.leases.release(s, lease, at)))

        @rule(data=st.data(), status=st.sampled_from(TERMINALS))
        def report(self, data: st.DataObject, status: TaskStatus) -> None:
            if not self.tasks:
                return
            task_id = data.draw(st.sampled_from(self.tasks))
            self.run(
                self.scheduler.transact(
                    self.scheduler.report_result, task_id, TaskResult(status, "r")
                )
            )
            self.terminal.setdefault(task_id, self._status(task_id))

        @rule(data=st.data(), key=st.sampled_from(["k1", "k2", "k3"]))
        def append(self, data: st.DataObject, key: str) -> None:
            if not self.tasks:
                return
            task_id = data.draw(st.sampled_from(self.tasks))
            self.run(
                self.scheduler.transact(
                    self.scheduler.append_mailbox, task_id, key, [text_part(key)]
                )
            )

        @rule(data=st.data())
        def cancel(self, data: st.DataObject) -> None:
            if self.tasks:
                task_id = data.draw(st.sampled_from(self.tasks))
                self.run(
                    self.scheduler.transact(self.scheduler.request_cancel, task_id, "stop", "u")
                )

        @rule(seconds=st.sampled_from([1, 6, 11]))
        def advance_and_sweep(self, seconds: int) -> None:
            self.clock.advance(seconds)
            self.run(self.scheduler.transact(self.scheduler.sweep))

        def _status(self, task_id: str) -> TaskStatus:
            row = database.run_sync(lambda s: s.get(TaskRow, task_id))
            assert row is not None
            return TaskStatus(row.status)

        @invariant()
        def terminal_is_final(self) -> None:
            for task_id, status in self.terminal.items():
                assert self._status(task_id) is status

        @invariant()
        def mailbox_seq_has_no_gaps(self) -> None:
            def rows(session: Any) -> list[tuple[str, int]]:
                query = select(MailboxMessageRow.task_id, MailboxMessageRow.seq)
                return [(t, s) for t, s in session.execute(query)]

            per_task: dict[str, list[int]] = {}
            for task_id, seq in database.run_sync(rows):
                per_task.setdefault(task_id, []).append(seq)
            for seqs in per_task.values():
                assert sorted(seqs) == list(range(1, len(seqs) + 1))

    return SchedulerMachine


def test_lifecycle_invariants_hold_when_operations_are_random(database: Database) -> None:
    run_state_machine_as_test(
        _machine(database),
        settings=settings(
            max_examples=25,
            stateful_step_count=30,
            deadline=None,
            suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
        ),
    )
