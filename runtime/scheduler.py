"""The scheduler: the single lifecycle authority for Tasks.

Expected outcomes are typed results, not exceptions. Only this module writes task status
(through ``runtime.store.tasks.set_status``), but for the ``running`` a claim records
(``runtime.leases``, which holds claims and leases and is reached as ``Scheduler.leases``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Concatenate, ParamSpec, TypeVar

from runtime.clock import Clock, SystemClock
from runtime.ids import new_task_id
from runtime.leases import Leases, notify_in
from runtime.notifier import Notifier
from runtime.store import deliveries, executions, mailbox
from runtime.store import tasks as q
from runtime.store.engine import Database, Transaction, UniqueViolation
from runtime.store.records import (
    MailboxMessage,
    MailboxPart,
    StatusChange,
    Task,
    TaskResult,
    TaskSpec,
    TaskStatus,
)

T = TypeVar("T")
P = ParamSpec("P")

# Cancel deliveries sort ahead of anything queued.
_PRIORITY = timedelta(days=3650)
_OVERDUE = TaskResult(TaskStatus.timed_out, "the task passed its deadline")


@dataclass(frozen=True, slots=True)
class Scheduled:
    task: Task
    created: bool


@dataclass(frozen=True, slots=True)
class TreeFull:
    """A child was refused: its tree already holds ``size`` tasks, the cap."""

    size: int


@dataclass(frozen=True, slots=True)
class Appended:
    message: MailboxMessage


@dataclass(frozen=True, slots=True)
class Duplicate:
    message: MailboxMessage


@dataclass(frozen=True, slots=True)
class AlreadyTerminal:
    status: TaskStatus


@dataclass(frozen=True, slots=True)
class NotFound:
    task_id: str


@dataclass(frozen=True, slots=True)
class Accepted:
    task: Task


@dataclass(frozen=True, slots=True)
class Missing:
    task_id: str


AppendOutcome = Appended | Duplicate | AlreadyTerminal | NotFound
ReportOutcome = Accepted | AlreadyTerminal | Missing


@dataclass(frozen=True, slots=True)
class SweepReport:
    recovered: int
    timed_out: int


class Scheduler:
    def __init__(
        self,
        db: Database,
        *,
        clock: Clock | None = None,
        notifier: Notifier | None = None,
        lease_seconds: float = 30.0,
    ) -> None:
        self.db = db
        self.clock = clock or SystemClock()
        self.notifier = notifier or Notifier()
        self.lease_seconds = lease_seconds
        self.leases = Leases(db, self.clock, lease_seconds)

    # -- running an operation ------------------------------------------------------------

    async def transact(
        self, op: Callable[Concatenate[Transaction, P], T], *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """``op(session, *args, **kwargs)`` in a transaction of its own, then wake this
        process's workers and outbox unless the outcome says nothing became runnable (a
        duplicate, a refusal, an empty sweep): ``await scheduler.transact(scheduler.schedule,
        spec)``.

        Every operation takes the caller's session, so routing and the executor put theirs
        in the transaction that records why; this is the doorway for a caller with nothing
        else to write (``op`` may be any function of a session, to run several operations in
        one transaction). A unique violation means a concurrent writer won an insert race and
        the transaction rolled back: it runs once more and finds the winner's row (a child's
        key, a mailbox key), as the operations read before they insert.
        """

        def work(session: Transaction) -> T:
            return op(session, *args, **kwargs)

        try:
            outcome = await self.db.run(work)
        except UniqueViolation:
            outcome = await self.db.run(work)
        if _made_work(outcome):
            self.wake()
        return outcome

    # -- creation -------------------------------------------------------------------------

    def schedule(self, session: Transaction, spec: TaskSpec) -> Scheduled:
        """Create the task; the caller wakes workers after commit (``transact`` does)."""
        now = self.clock.now()
        parent = q.lock_task(session, spec.parent_id) if spec.parent_id else None
        if spec.parent_id and parent is None:
            raise ValueError(f"parent task {spec.parent_id} does not exist")
        if parent is not None and spec.child_key is not None:
            existing = q.find_child(session, parent.task_id, spec.child_key)
            if existing is not None:
                return Scheduled(existing, created=False)
        task = q.insert_task(session, new_task_id(), spec, parent, now)
        notify_in(self.db, session)
        return Scheduled(task, created=True)

    def schedule_child(
        self, session: Transaction, spec: TaskSpec, *, max_tree_tasks: int
    ) -> Scheduled | TreeFull:
        """A child task, unless its tree already holds ``max_tree_tasks`` tasks (a resident
        root's tree: those made in its current activation). The child made before under the
        same key is returned whatever the tree's size."""
        assert spec.parent_id is not None and spec.child_key is not None
        parent = q.get_task(session, spec.parent_id)
        if parent is None:
            raise ValueError(f"parent task {spec.parent_id} does not exist")
        # The root's row lock makes count-then-insert hold across the whole tree: siblings
        # in other branches lock it too (top-down, as a stop does).
        q.lock_task_row(session, parent.root_id)
        existing = q.find_child(session, parent.task_id, spec.child_key)
        if existing is not None:
            return Scheduled(existing, created=False)
        size = q.tree_size(session, parent.root_id, since=_activation_of(session, parent.root_id))
        if size >= max_tree_tasks:
            return TreeFull(size)
        return self.schedule(session, spec)

    def sweep(self, session: Transaction, *, limit: int = 100) -> SweepReport:
        """Expired leases become one recovery delivery each; overdue tasks become timed_out."""
        now = self.clock.now()
        expired = executions.take_back_expired(session, now, limit)
        for task_id in expired:
            deliveries.add_delivery(session, task_id, "recovery", now, now)
        overdue = q.overdue_tasks(session, now, limit)
        for task in overdue:
            q.settle(session, task.task_id, _OVERDUE, now)
            self._wake_for_stop(session, task.task_id, now)
        if expired or overdue:
            notify_in(self.db, session)
        return SweepReport(len(expired), len(overdue))

    # -- mailbox --------------------------------------------------------------------------

    def append_mailbox(
        self,
        session: Transaction,
        task_id: str,
        key: str,
        parts: Sequence[MailboxPart],
        author: str | None = None,
    ) -> AppendOutcome:
        """Append once per (task, key): a second append under the key is a ``Duplicate``."""
        now = self.clock.now()
        task = q.lock_task(session, task_id)
        if task is None:
            return NotFound(task_id)
        existing = mailbox.find_message(session, task_id, key)
        if existing is not None:
            return Duplicate(existing)
        if task.status.is_terminal:
            return AlreadyTerminal(task.status)
        message = mailbox.append_message(session, task_id, key, parts, author, now)
        if task.status == TaskStatus.waiting:
            self._wake_waiting(session, task_id, now)
        session.flush()
        return Appended(message)

    async def read_mailbox(self, task_id: str, after: int = 0) -> list[MailboxMessage]:
        return await self.db.read(lambda s: mailbox.messages_after(s, task_id, after))

    # -- waiting, cancel and results ------------------------------------------------------

    def enter_waiting(self, session: Transaction, task_id: str) -> bool:
        """Park a running task; refused (False) if input arrived it has not read yet."""
        now = self.clock.now()
        task = q.lock_task(session, task_id)
        execution = executions.lock_execution(session, task_id)
        if task is None or execution is None or task.status.is_terminal:
            return False
        if task.mailbox_seq > execution.mailbox_position or task.cancel_requested_at:
            return False
        q.set_status(session, task_id, TaskStatus.waiting, now)
        return True

    def _wake_waiting(self, session: Transaction, task_id: str, now: datetime) -> None:
        execution = executions.lock_execution(session, task_id)
        q.set_status(session, task_id, TaskStatus.queued, now)
        if execution is not None and not executions.lease_is_live(execution, now):
            deliveries.add_delivery(session, task_id, "wake", now, now)
            notify_in(self.db, session)

    def request_cancel(
        self, session: Transaction, task_id: str, reason: str, requested_by: str | None
    ) -> bool:
        """Record a stop; False if the task is missing or already terminal."""
        task = q.lock_task(session, task_id)
        now = self.clock.now()  # read under the lock, so the stop time orders with dispatch
        if task is None or task.status.is_terminal:
            return False
        q.record_cancel(session, task_id, now, reason, requested_by)
        self._wake_for_stop(session, task_id, now)
        for child in q.active_descendants(session, task):
            self._wake_for_stop(session, child.task_id, now)
        notify_in(self.db, session)
        return True

    def _wake_for_stop(self, session: Transaction, task_id: str, now: datetime) -> None:
        """Give an idle task a tick, ahead of the queue, so it observes the stop promptly."""
        execution = executions.lock_execution(session, task_id)
        if execution is None or execution.phase == "done":
            return
        if executions.lease_is_live(execution, now):
            return
        deliveries.add_delivery(session, task_id, "stop", now - _PRIORITY, now)

    async def stop_requested(self, task_id: str) -> bool:
        """True if the task or any ancestor has a stop recorded or is already terminal."""

        def requested(session: Transaction) -> bool:
            task = q.read_task(session, task_id)
            return task is None or q.stop_recorded(session, task)

        return await self.db.read(requested)

    def report_result(
        self, session: Transaction, task_id: str, result: TaskResult
    ) -> ReportOutcome:
        if not result.status.is_terminal:
            raise ValueError(f"report_result needs a terminal status, not {result.status}")
        now = self.clock.now()
        task = q.lock_task(session, task_id)
        if task is None:
            return Missing(task_id)
        if task.status.is_terminal:
            return AlreadyTerminal(task.status)
        settled = q.settle(session, task_id, result, now)
        if task.parent_id:
            parent = q.lock_task(session, task.parent_id)
            if parent is not None and parent.status == TaskStatus.waiting:
                self._wake_waiting(session, parent.task_id, now)
        return Accepted(settled)

    # -- reads ----------------------------------------------------------------------------

    async def get(self, task_id: str) -> Task | None:
        """One task, read outside any write transaction."""
        return await self.db.read(lambda s: q.get_task(s, task_id))

    def wake(self) -> None:
        """After a commit that made work runnable: wake this process's workers and outbox."""
        self.notifier.notify()

    async def history(self, task_id: str) -> list[StatusChange]:
        return await self.db.read(lambda s: q.status_history(s, task_id))


def _made_work(outcome: object) -> bool:
    """Whether an operation's outcome may have made work runnable (anything not known to be
    a no-op counts, so a function running several operations always wakes)."""
    match outcome:
        case Scheduled(created=created):
            return created
        case SweepReport(recovered=recovered, timed_out=timed_out):
            return bool(recovered or timed_out)
        case bool():
            return outcome
        case Duplicate() | AlreadyTerminal() | NotFound() | Missing() | TreeFull():
            return False
        case _:
            return True


def _activation_of(session: Transaction, root_id: str) -> datetime | None:
    """When a resident root's current activation began; None for any other root."""
    run = executions.load_run(session, root_id)
    activation = run.state.activation if run is not None else None
    return activation.since if activation is not None else None
