"""Machines and the workspaces they hold (``MachineRow``, ``WorkspaceOwnerRow``).

A task tree's workspace is a folder on one machine. That machine owns it, recorded here, for
as long as the machine's lease is renewed (every worker with its identity renews it): while
it lives, only its workers claim the tree's tasks, so no second copy of the workspace comes
to be. Once its lease has passed, the next worker to claim one of the tree's tasks takes the
workspace over, and restores it from the latest snapshot recorded here.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import cast

from sqlalchemy import Table, bindparam, exists, func, select
from sqlalchemy.orm import Session
from sqlalchemy.sql.elements import ColumnElement

from runtime.store.models import (
    DeliveryRow,
    ExecutionRow,
    MachineRow,
    TaskRow,
    UtcDateTime,
    WorkspaceOwnerRow,
)


@dataclass(frozen=True, slots=True)
class Snapshot:
    """The latest saved state of a workspace: a commit (its parent is the workspace's HEAD
    then, its tree the whole worktree), after turn ``turn``."""

    sha: str
    tree: str
    turn: int
    at: datetime


@dataclass(frozen=True, slots=True)
class Owner:
    root_id: str
    machine_id: str
    since: datetime
    snapshot: Snapshot | None
    taken_from: str | None  # the lost machine, until the task was told it was taken over


@dataclass(frozen=True, slots=True)
class Held:
    """The workspace is this machine's (``owner`` as it stands now)."""

    owner: Owner


@dataclass(frozen=True, slots=True)
class Elsewhere:
    """Another machine holds the workspace: its lease is live, or a task of the tree is
    still leased by one of its workers (until ``until``)."""

    machine_id: str
    until: datetime | None = None


def renew_machine(session: Session, machine_id: str, now: datetime, lease_seconds: float) -> None:
    """This machine is alive until ``now + lease_seconds``."""
    row = session.get(MachineRow, machine_id)
    expires = now + timedelta(seconds=lease_seconds)
    if row is None:
        session.add(MachineRow(machine_id=machine_id, lease_expires_at=expires, seen_at=now))
    else:
        row.lease_expires_at, row.seen_at = expires, now
    session.flush()


def machine_is_live(session: Session, machine_id: str, now: datetime) -> bool:
    row = session.get(MachineRow, machine_id)
    return row is not None and row.lease_expires_at > now


def take_workspace(
    session: Session, root_id: str, machine_id: str, now: datetime, claiming: str = ""
) -> Held | Elsewhere:
    """Make ``machine_id`` the owner of the tree's workspace unless a live machine holds it.

    A machine whose lease passed still holds it while a task of the tree other than
    ``claiming`` is leased (its worker may still be running a phase there: the two leases
    are renewed apart). The row is locked (PostgreSQL) so two machines that both saw a lost
    owner do not both take the workspace; the loser finds the winner live. On SQLite writers
    are serial."""
    row = session.get(WorkspaceOwnerRow, root_id, with_for_update=True)
    if row is None:
        row = WorkspaceOwnerRow(root_id=root_id, machine_id=machine_id, since=now)
        session.add(row)
        session.flush()
        return Held(_owner(row))
    if row.machine_id != machine_id:
        if machine_is_live(session, row.machine_id, now):
            return Elsewhere(row.machine_id)
        leased = _leased_until(session, root_id, claiming, now)
        if leased is not None:
            return Elsewhere(row.machine_id, leased)
        row.taken_from, row.machine_id, row.since = row.machine_id, machine_id, now
        session.flush()
    return Held(_owner(row))


def _leased_until(session: Session, root_id: str, claiming: str, now: datetime) -> datetime | None:
    """When the last live lease on a task of the tree (but ``claiming``) runs out."""
    query = select(func.max(_EXECUTIONS.c.lease_expires_at)).where(
        _EXECUTIONS.c.task_id == _TASKS.c.id,
        _TASKS.c.root_id == root_id,
        _TASKS.c.id != claiming,
        _EXECUTIONS.c.lease_id.is_not(None),
        _EXECUTIONS.c.lease_expires_at > now,
    )
    until = session.execute(query).scalar()
    return None if until is None else _aware(until)


def owner_of(session: Session, root_id: str) -> Owner | None:
    row = session.get(WorkspaceOwnerRow, root_id)
    return None if row is None else _owner(row)


def record_snapshot(session: Session, root_id: str, machine_id: str, snapshot: Snapshot) -> bool:
    """Record the workspace's latest snapshot, if ``machine_id`` still owns it (a machine that
    lost the workspace to another never overwrites the newer owner's snapshots)."""
    row = session.get(WorkspaceOwnerRow, root_id, with_for_update=True)
    if row is None or row.machine_id != machine_id:
        return False
    row.snapshot_sha, row.snapshot_tree = snapshot.sha, snapshot.tree
    row.snapshot_turn, row.snapshot_at = snapshot.turn, snapshot.at
    session.flush()
    return True


def told_of_takeover(session: Session, root_id: str, machine_id: str) -> None:
    """The task was told its workspace was taken over: the note is not given again."""
    row = session.get(WorkspaceOwnerRow, root_id, with_for_update=True)
    if row is not None and row.machine_id == machine_id:
        row.taken_from = None
        session.flush()


def _owner(row: WorkspaceOwnerRow) -> Owner:
    snapshot = None
    if row.snapshot_sha and row.snapshot_tree and row.snapshot_at is not None:
        snapshot = Snapshot(
            row.snapshot_sha, row.snapshot_tree, row.snapshot_turn or 0, row.snapshot_at
        )
    return Owner(row.root_id, row.machine_id, row.since, snapshot, row.taken_from)


def _aware(moment: datetime) -> datetime:
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


_DELIVERIES = cast(Table, DeliveryRow.__table__)
_EXECUTIONS = cast(Table, ExecutionRow.__table__)
_TASKS = cast(Table, TaskRow.__table__)
_OWNERS = cast(Table, WorkspaceOwnerRow.__table__)
_MACHINES = cast(Table, MachineRow.__table__)


def held_elsewhere() -> ColumnElement[bool]:
    """For a query over deliveries: the delivery's task tree has its workspace on a machine
    other than ``b_machine`` whose lease is live at ``b_now`` (such a delivery is that
    machine's to claim)."""
    return exists().where(
        _TASKS.c.id == _DELIVERIES.c.task_id,
        _OWNERS.c.root_id == _TASKS.c.root_id,
        _OWNERS.c.machine_id != bindparam("b_machine"),
        _MACHINES.c.machine_id == _OWNERS.c.machine_id,
        _MACHINES.c.lease_expires_at > bindparam("b_now", type_=UtcDateTime),
    )
