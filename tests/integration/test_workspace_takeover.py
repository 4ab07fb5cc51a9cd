"""A lost machine's task goes on elsewhere with its edits (#42): two ``keel worker`` processes
stand for two machines (their own machine identity and workspace root; nothing shared but the
database and the snapshot store). The owner is killed -9 while a command runs; the other takes
the task over once the owner's lease has passed, restores the workspace from its snapshot,
reports the command interrupted (never runs it again) and finishes with every edit committed.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path

import yaml

from adapters.demo.repo import create_sample_repo
from runtime.clock import ManualClock, SystemClock
from runtime.leases import Claimed, Leases, NoMatch
from runtime.scheduler import Scheduler
from runtime.store import deliveries, mailbox, owners, tool_calls
from runtime.store.engine import Database
from runtime.store.records import Lease
from tests.factories import make_spec
from tests.harness import schedule_task, until

ROOT = Path(__file__).resolve().parents[2]
LEASE_S = 2.0

SCRIPT = {
    "scripts": [
        {
            "turns": [
                {
                    "tool_calls": [
                        {"name": "write_file", "args": {"path": "notes.txt", "content": "kept\n"}}
                    ]
                },
                {
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "args": {
                                "command": "touch ../started; sleep 120; echo ran >> ../ran.log",
                                "timeout_s": 600,
                            },
                        }
                    ]
                },
                {
                    "expect_seen": ["interrupted", "restored from the snapshot"],
                    "tool_calls": [{"name": "git_commit", "args": {"message": "keep the notes"}}],
                },
                {"say": "done: the notes are committed"},
            ]
        }
    ]
}


def _config(tmp_path: Path, db_url: str, origin: Path, machine: str) -> Path:
    config = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {
            "root": str(tmp_path / machine / "workspaces"),
            "sandbox": "none",
            "snapshots": str(tmp_path / "shared" / "snapshots.git"),
            "repositories": {"shop": {"url": origin.as_uri()}},
        },
        "worker": {
            "concurrency": 2,
            "poll_interval_s": 0.1,
            "lease_seconds": LEASE_S,
            "machine": machine,
        },
    }
    path = tmp_path / f"{machine}.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


def _worker(config: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-c", "from adapters.cli import main; main()", "worker"]
    return subprocess.Popen(
        [*argv, "--config", str(config)],
        cwd=ROOT,
        env={**os.environ, "KEEL_DATABASE_URL": ""},
        stdout=subprocess.DEVNULL,
        stderr=config.with_suffix(".log").open("wb"),
    )


async def test_a_task_whose_machine_is_lost_goes_on_elsewhere_with_its_edits(
    db_url: str, tmp_path: Path
) -> None:
    origin = create_sample_repo(tmp_path / "origin")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    first, second = (_config(tmp_path, db_url, origin, m) for m in ("a", "b"))
    db = Database.from_url(db_url)
    task = await schedule_task(db, repo="shop", message="take notes")
    owner = _worker(first)
    other: subprocess.Popen[bytes] | None = None
    try:
        await until(lambda: _command_is(db, task.task_id, "started"))
        await until(_exists(tmp_path / "a" / "workspaces" / "started"))
        other = _worker(second)
        await asyncio.sleep(LEASE_S)  # the other machine is up, looking for work
        held = await db.read(lambda s: owners.owner_of(s, task.root_id))
        assert held is not None and held.machine_id == "a" and held.snapshot is not None
        owner.send_signal(signal.SIGKILL)
        owner.wait(timeout=20)
        await until(lambda: _status_is(db, task.task_id, "succeeded"), timeout=60)
    finally:
        for process in (owner, other):
            if process is not None and process.poll() is None:
                process.send_signal(signal.SIGTERM)
                process.wait(timeout=20)
    calls = await db.read(lambda s: tool_calls.all_calls(s, task.task_id))
    outcomes = {c.name: c.outcome for c in calls}
    assert outcomes == {"write_file": "ok", "run_command": "interrupted", "git_commit": "ok"}
    [note] = await db.read(lambda s: mailbox.messages_after(s, task.task_id, 0))
    assert "run_command" in str(note.parts)
    # The edit made on the lost machine is in the commit made on the other.
    workspace = tmp_path / "b" / "workspaces" / task.root_id
    shown = _git(workspace, "show", "--stat", "--format=%s", "HEAD")
    assert "keep the notes" in shown and "notes.txt" in shown
    assert (workspace / "notes.txt").read_text() == "kept\n"
    assert not list(tmp_path.rglob("ran.log"))  # the command never finished, nor ran again
    final = await db.read(lambda s: owners.owner_of(s, task.root_id))
    assert final is not None and final.machine_id == "b" and final.taken_from is None
    db.close()


async def test_while_its_owner_lives_no_other_machine_claims_a_tree(db_url: str) -> None:
    """200 rounds: the owner's tree gets a new delivery each round and the other machine
    looks first every time; it never claims one, the owner claims each. Once the owner's
    lease has passed, the other machine takes the tree over."""
    db = Database.from_url(db_url)
    task = await schedule_task(db, repo="shop", message="anything")
    clock = ManualClock(SystemClock().now() + timedelta(seconds=1))
    leases = Scheduler(db, lease_seconds=30, clock=clock).leases
    for machine in ("a", "b"):
        await _renew(db, machine, clock)
    claimed = await leases.claim_next("a/0", machine="a")
    assert isinstance(claimed, Claimed) and claimed.moved_from is None
    others = 0
    for _ in range(200):
        await _release(db, leases, claimed.lease, clock)
        if isinstance(await leases.claim_next("b/0", machine="b"), Claimed):
            others += 1
        claimed = await leases.claim_next("a/0", machine="a")
        assert isinstance(claimed, Claimed) and claimed.task.task_id == task.task_id
    assert others == 0
    await _release(db, leases, claimed.lease, clock)
    clock.advance(61)  # a stops renewing its lease; b goes on renewing its own
    await _renew(db, "b", clock)
    taken = await leases.claim_next("b/0", machine="b")
    assert isinstance(taken, Claimed) and taken.moved_from == "a"
    db.close()


async def _release(db: Database, leases: Leases, lease: Lease, clock: ManualClock) -> None:
    """Give the lease back with a tick due now: a new delivery for the tree."""
    await db.run(lambda s: leases.release(s, lease, clock.now()))


async def _ready(db: Database, at: datetime) -> int:
    return len(await db.read(lambda s: deliveries.next_ready_tokens(s, at, 10, False)))


async def _renew(db: Database, machine: str, clock: ManualClock) -> None:
    await db.run(lambda s: owners.renew_machine(s, machine, clock.now(), 60))


def _git(ws: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-C", str(ws), *args], check=True, capture_output=True, text=True
    ).stdout


def _exists(path: Path) -> Callable[[], Awaitable[bool]]:
    async def check() -> bool:
        return path.exists()

    return check


async def _command_is(db: Database, task_id: str, state: str) -> bool:
    calls = await db.read(lambda s: tool_calls.all_calls(s, task_id))
    return any(c.name == "run_command" and c.dispatch_state == state for c in calls)


async def _status_is(db: Database, task_id: str, status: str) -> bool:
    task = await Scheduler(db).get(task_id)
    return task is not None and task.status.value == status


async def test_a_tree_still_leased_by_the_lost_machine_is_not_taken_over(db_url: str) -> None:
    """Machine a's lease passed, but one of its workers still holds the lease of a task of
    the tree (the two leases are renewed apart): b claims nothing of the tree until that
    lease has passed too, and the delivery it looked at waits for then, not a hot loop."""
    db = Database.from_url(db_url)
    root = await schedule_task(db, repo="shop", message="the parent")
    clock = ManualClock(SystemClock().now() + timedelta(seconds=1))
    scheduler = Scheduler(db, lease_seconds=120, clock=clock)
    leases = scheduler.leases
    await _renew(db, "a", clock)
    held = await leases.claim_next("a/0", machine="a")
    assert isinstance(held, Claimed) and held.task.task_id == root.task_id
    child = make_spec(parent_id=root.task_id, child_key="c1", repo="shop", message="the child")
    await scheduler.transact(scheduler.schedule_child, child, max_tree_tasks=10)
    clock.advance(61)  # a's machine lease passed; its worker's lease on the parent has not
    await _renew(db, "b", clock)
    assert isinstance(await leases.claim_next("b/0", machine="b"), NoMatch)
    # b looked at the child's delivery and put it back for when the parent's lease ends.
    assert await _ready(db, clock.now()) == 0
    assert await _ready(db, clock.now() + timedelta(seconds=60)) == 1
    owner = await db.read(lambda s: owners.owner_of(s, root.task_id))
    assert owner is not None and owner.machine_id == "a"
    clock.advance(60)  # the parent's lease passed too
    await _renew(db, "b", clock)
    taken = await leases.claim_next("b/0", machine="b")
    assert isinstance(taken, Claimed) and taken.moved_from == "a"
    db.close()
