"""Claims and leases: which worker runs a task now, until when, and giving the task back.

Claims are decided by the database: a delivery token is consumed by exactly one conditional
update, on SQLite and on PostgreSQL alike, and the lease it grants moves the execution's
version, so a worker that lost its lease cannot commit. A claim marks the task running: the
one status write outside the scheduler, made with the claim it belongs to.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runtime.clock import Clock
from runtime.store import deliveries, executions, mailbox, owners, tool_calls
from runtime.store import tasks as q
from runtime.store.engine import Database, Transaction
from runtime.store.records import Lease, Task, TextPart


@dataclass(frozen=True, slots=True)
class Claimed:
    task: Task
    lease: Lease
    # The machine whose workspace this claim took over (its lease had passed); this
    # machine's own copy of that workspace, if it has one from before, is stale.
    moved_from: str | None = None


@dataclass(frozen=True, slots=True)
class NoMatch:
    reason: str


class Leases:
    def __init__(self, db: Database, clock: Clock, lease_seconds: float) -> None:
        self.db = db
        self.clock = clock
        self.lease_seconds = lease_seconds

    async def claim(self, token: str, worker: str, machine: str | None = None) -> Claimed | NoMatch:
        return await self.db.run(lambda s: self._claim(s, token, worker, machine))

    def _claim(
        self, session: Transaction, token: str, worker: str, machine: str | None = None
    ) -> Claimed | NoMatch:
        now = self.clock.now()
        task_id = deliveries.consume_delivery(session, token, worker, now)
        if task_id is None:
            return NoMatch("no matching pending delivery")
        tree = q.lock_tree(session, task_id)  # the task before its execution
        if tree is None:
            return NoMatch("task missing")
        lease = executions.take_lease(session, task_id, worker, now, self.lease_seconds)
        if lease is None:
            return NoMatch(_not_leased(session, task_id))
        moved_from = None
        if machine is not None and tree.repo is not None:
            taken = _take_workspace(session, tree, task_id, machine, now)
            if isinstance(taken, owners.Elsewhere):
                # Its owner (or a lease of one of its workers) is still live: the task is
                # theirs to run, so they get the delivery this claim consumed, when due.
                executions.give_back_lease(session, task_id, lease.lease_id)
                deliveries.add_delivery(session, task_id, "owner", taken.until or now, now)
                return NoMatch(f"its workspace is on {taken.machine_id}")
            moved_from = taken.owner.taken_from
        task = q.start_running(session, task_id, now)
        if task is None:
            return NoMatch("task missing")
        return Claimed(task, lease, moved_from)

    async def claim_next(
        self, worker: str, *, scan: int = 8, machine: str | None = None
    ) -> Claimed | NoMatch:
        """Claim the oldest ready delivery (PostgreSQL: ``FOR UPDATE SKIP LOCKED``). With
        ``machine``, only a task whose workspace no other live machine holds, and the
        claim makes the workspace this machine's (``runtime.store.owners``).

        On SQLite an idle worker first looks without the write lock, so polling for work
        does not queue behind (or delay) the writers that are doing some.
        """
        if not self.db.is_postgres:
            now = self.clock.now()
            ready = await self.db.read(
                lambda s: deliveries.next_ready_tokens(s, now, 1, False, machine)
            )
            if not ready:
                return NoMatch("nothing ready")
        # Unflushed (``Database.run``): a claim lost in a crash of the database server
        # leaves the delivery to be claimed again, and the lease it took is gone, so this
        # worker's next transition finds the run fenced off.
        return await self.db.run(lambda s: self._claim_next(s, worker, scan, machine), flush=False)

    def _claim_next(
        self, session: Transaction, worker: str, scan: int, machine: str | None = None
    ) -> Claimed | NoMatch:
        """Look up ready deliveries one at a time, oldest first, trying at most ``scan``.

        On PostgreSQL each lookup locks only the row it returns (``SKIP LOCKED``): a worker
        claiming at the same moment takes the next delivery. Locking a batch made a claim
        that raced for the last few deliveries find all of them locked, so that worker slept
        a poll interval while work was still ready. A delivery tried and not won (its task
        gone, or its lease held) is consumed all the same, so the next lookup passes it.
        """
        now = self.clock.now()
        for _ in range(scan):
            tokens = deliveries.next_ready_tokens(
                session, now, 1, skip_locked=self.db.is_postgres, machine=machine
            )
            if not tokens:
                break
            outcome = self._claim(session, tokens[0], worker, machine)
            if isinstance(outcome, Claimed):
                return outcome
        return NoMatch("nothing ready")

    async def renew(self, lease: Lease) -> Lease | None:
        """Extend a lease still held; None if it was lost (expired and recovered)."""

        def renew(session: Transaction) -> Lease | None:
            now = self.clock.now()
            expires = executions.renew_lease(
                session, lease.task_id, lease.lease_id, now, self.lease_seconds
            )
            if expires is None:
                return None
            return Lease(lease.task_id, lease.lease_id, lease.owner, expires)

        return await self.db.run(renew)

    def release(self, session: Transaction, lease: Lease, next_tick_at: datetime | None) -> bool:
        """Give the lease back in the caller's transaction, optionally scheduling the next
        tick. False if it was already lost."""
        now = self.clock.now()
        if not executions.give_back_lease(session, lease.task_id, lease.lease_id):
            return False
        if next_tick_at is not None:
            deliveries.add_delivery(session, lease.task_id, "tick", next_tick_at, now)
            notify_in(self.db, session)
        return True


def _take_workspace(
    session: Transaction, tree: q.Tree, task_id: str, machine: str, now: datetime
) -> owners.Held | owners.Elsewhere:
    """Take the task tree's workspace for ``machine`` (claiming ``task_id``, whose lease
    this claim holds), handing the tree over when it comes from a lost machine; or the
    machine that still holds it."""
    taken = owners.take_workspace(session, tree.root_id, machine, now, claiming=task_id)
    if isinstance(taken, owners.Held) and taken.owner.taken_from is not None:
        _hand_over(session, taken.owner, now)
    return taken


# Tools whose open calls do not depend on the machine they were started on: reads may simply
# run again, and a wait for a child task is the database's.
_MACHINE_FREE = frozenset({"wait_for_task"})


def _hand_over(session: Transaction, owner: owners.Owner, now: datetime) -> None:
    """The workspace came from a machine whose lease passed (``owner.taken_from``): in the
    transaction that takes it, every open call of the tree that acted on that machine is
    settled ``interrupted`` (a command there is neither running nor re-run here), and each
    of the tree's live tasks gets one mailbox note of what happened to its workspace."""
    lost = owner.taken_from or "another machine"
    snapshot = owner.snapshot
    restored = (
        f"restored from the snapshot taken at {snapshot.at:%Y-%m-%d %H:%M:%S} UTC, after turn "
        f"{snapshot.turn} (commit {snapshot.sha[:12]}). Changes made after that snapshot "
        "are not in it"
        if snapshot is not None
        else "made afresh from the repository: no snapshot of it had been saved, so "
        "uncommitted changes made there are gone"
    )
    for task_id in q.live_tasks_of_tree(session, owner.root_id):
        interrupted = []
        for call in tool_calls.all_calls(session, task_id):
            if call.dispatch_state in ("settled", "pending") or call.name in _MACHINE_FREE:
                continue
            if call.effect == "read" and call.dispatch_state != "started":
                continue  # never started there, or a read that may run again here
            output = (
                f"interrupted: {call.name} was running on {lost}, which stopped answering; "
                "it is not running any more and was not run again. Its effects, if any, "
                "are only those the restored workspace shows."
            )
            result = {"output": output, "is_error": True}
            tool_calls.settle(
                session, task_id, call.call_id, outcome="interrupted", result=result, now=now
            )
            interrupted.append(call.name)
        note = f"Keel: the machine that held this task's workspace ({lost}) stopped answering, "
        note += f"and the task moved to another machine. The workspace was {restored}."
        if interrupted:
            note += f" Interrupted there, and not run again: {', '.join(interrupted)}."
        key = f"takeover:{owner.machine_id}:{owner.since.isoformat()}"
        if mailbox.find_message(session, task_id, key) is None:
            mailbox.append_message(session, task_id, key, [TextPart(note)], None, now)
    owners.told_of_takeover(session, owner.root_id, owner.machine_id)


def notify_in(db: Database, session: Transaction) -> None:
    """Wake workers on other machines once this transaction commits (PostgreSQL's
    ``NOTIFY``; on SQLite every worker is in this process and is woken after the commit)."""
    if db.is_postgres:
        session.connection().exec_driver_sql("NOTIFY keel_ready")


def _not_leased(session: Transaction, task_id: str) -> str:
    """Why a claim found no lease to take (read after the fact: this is the rare path)."""
    execution = executions.lock_execution(session, task_id)
    if execution is None:
        return "task missing"
    if execution.phase == "done":
        return "execution already done"
    return "another worker holds the lease"
