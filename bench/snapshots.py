"""What saving workspaces for another machine costs (#42): two figures, under bubblewrap.

- ``snapshot_vs_write_phase``: on the demo's repository, a write phase of the demo's kind
  (``write_file`` of the fix, then ``run_command`` of the demo's tests, as the devbox tools do
  them) against the snapshot Keel takes after it (``SnapshotStore.take``: the sandboxed
  ``git add`` into a temporary index, the pack into the mirror, the push to the store), median
  of the pairs, each pair changing the workspace anew. Target ≤ 0.5.
- ``takeover_next_phase_s``: a 50 MB workspace (a 25 MB clone and 25 MB of new files written
  by the task), snapshotted on one machine; on another (its own workspace root), the time from
  its claim of the task (ownership moved, the calls of the lost machine settled, the note
  written) to the workspace ready for the next phase (clone and restore). The baseline, for
  scale, is a plain ``git clone`` of the origin. Target ≤ 5 s, judged on the value.

No timing is asserted anywhere; this prints RESULT lines for ``bench/run.py``.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.demo.repo import create_sample_repo  # noqa: E402
from adapters.emulators.github_git import init_bare_repository  # noqa: E402
from bench.common import Figure  # noqa: E402
from bench.sandbox import run_to_end  # noqa: E402
from runtime.clock import SystemClock  # noqa: E402
from runtime.leases import Claimed  # noqa: E402
from runtime.scheduler import Scheduler  # noqa: E402
from runtime.store import owners  # noqa: E402
from runtime.store.engine import Database  # noqa: E402
from runtime.store.migrate import upgrade  # noqa: E402
from runtime.store.records import TaskSpec  # noqa: E402
from runtime.tools.base import ToolContext  # noqa: E402
from runtime.tools.devbox.command import RunCommand  # noqa: E402
from runtime.tools.devbox.files import WriteFile  # noqa: E402
from runtime.workspace import Workspaces, WorkspaceSpec  # noqa: E402
from runtime.workspace.sandbox import Sandbox, bwrap_works  # noqa: E402
from runtime.workspace.snapshots import Taken  # noqa: E402

PHASES = 9
TESTS = "python3 -m unittest -q"


async def phase_vs_snapshot(root: Path) -> list[tuple[float, float]]:
    origin = create_sample_repo(root / "origin")
    store = root / "shared" / "snapshots.git"
    workspaces = Workspaces(root / "a", "bwrap", snapshots=store)
    assert workspaces.snapshots is not None
    ws = await workspaces.ensure(WorkspaceSpec("t1", str(origin)))
    write, run = WriteFile(), RunCommand(Sandbox(mode="bwrap"))
    previous: tuple[str, str] | None = None
    pairs = []
    for n in range(PHASES + 1):
        started = time.perf_counter()
        ctx = ToolContext("t1", "t1", f"w{n}", workspace=ws)
        fix = f"def add(a: int, b: int) -> int:\n    return a + b  # {n}\n"
        await write.start({"path": "calc.py", "content": fix}, ctx)
        await run_to_end(run, ws, TESTS, f"r{n}")
        phase = time.perf_counter() - started
        started = time.perf_counter()
        taken = await workspaces.snapshots.take(ws, "t1", "a", previous)
        snapshot = time.perf_counter() - started
        if not isinstance(taken, Taken):
            raise RuntimeError("a changed workspace made no snapshot")
        previous = (taken.sha, taken.tree)
        if n:  # the first pair warms the sandbox's caches
            pairs.append((snapshot, phase))
    return pairs


def big_origin(root: Path) -> Path:
    """A repository whose checkout is 25 MB: 250 files of 100 KB that do not compress."""
    files = {f"data/{n:03}.bin": os.urandom(100 * 1024).hex()[: 100 * 1024] for n in range(250)}
    return init_bare_repository(root, "acme/big", files, "main", "data")


async def takeover_seconds(root: Path, db_url: str) -> tuple[float, float]:
    origin = big_origin(root / "origin")
    store = root / "shared" / "snapshots.git"
    db = Database.from_url(db_url)
    upgrade(db.engine)
    scheduler = Scheduler(db, lease_seconds=30)
    spec = TaskSpec(agent="default", message="grow", repo="big", objective_key="big")
    task = (await scheduler.transact(scheduler.schedule, spec)).task
    clock = SystemClock()
    await db.run(lambda s: owners.renew_machine(s, "a", clock.now(), 1))
    first = await scheduler.leases.claim_next("a/0", machine="a")
    assert isinstance(first, Claimed)
    on_a = Workspaces(root / "a", "bwrap", snapshots=store)
    assert on_a.snapshots is not None
    ws = await on_a.ensure(WorkspaceSpec(task.root_id, str(origin)))
    made = ws / "made"
    made.mkdir()
    for n in range(250):  # what the task wrote: 25 MB more
        (made / f"{n:03}.bin").write_bytes(os.urandom(100 * 1024))
    taken = await on_a.snapshots.take(ws, task.root_id, "a")
    assert isinstance(taken, Taken)
    saved = owners.Snapshot(taken.sha, taken.tree, 1, clock.now())
    await db.run(lambda s: owners.record_snapshot(s, task.root_id, "a", saved))
    lease = first.lease
    await db.run(lambda s: scheduler.leases.release(s, lease, clock.now()))
    await asyncio.sleep(1.1)  # a's lease passes

    async def latest(root_id: str) -> str | None:
        owner = await db.read(lambda s: owners.owner_of(s, root_id))
        return owner.snapshot.sha if owner and owner.snapshot else None

    on_b = Workspaces(root / "b", "bwrap", snapshots=store, latest_snapshot=latest)
    started = time.perf_counter()
    await db.run(lambda s: owners.renew_machine(s, "b", clock.now(), 30))
    claimed = await scheduler.leases.claim_next("b/0", machine="b")
    if not isinstance(claimed, Claimed) or claimed.moved_from != "a":
        raise RuntimeError(f"machine b did not take the task over: {claimed}")
    restored = await on_b.ensure(WorkspaceSpec(task.root_id, str(origin)))
    takeover = time.perf_counter() - started
    if len(list((restored / "made").iterdir())) != 250:
        raise RuntimeError("the restored workspace lacks the task's files")
    started = time.perf_counter()
    subprocess.run(["git", "clone", "-q", str(origin), str(root / "plain")], check=True)
    clone = time.perf_counter() - started
    db.close()
    return takeover, clone


async def main() -> int:
    if not await bwrap_works():
        raise SystemExit("bubblewrap is needed: the figures are of sandboxed work")
    with tempfile.TemporaryDirectory(prefix="keel-bench-snap-") as tmp:
        pairs = await phase_vs_snapshot(Path(tmp))
        snapshots, phases = zip(*pairs, strict=True)
        print(f"snapshot {statistics.median(snapshots) * 1000:.0f} ms, "
              f"write phase {statistics.median(phases) * 1000:.0f} ms (medians)")
        print(Figure("snapshot_vs_write_phase_s", statistics.median(snapshots),
                     statistics.median(phases), 0.5, higher_is_better=False,
                     ratios=tuple(s / p for s, p in pairs)).result_line())
    with tempfile.TemporaryDirectory(prefix="keel-bench-takeover-") as tmp:
        takeover, clone = await takeover_seconds(Path(tmp), f"sqlite:///{tmp}/keel.db")
        print(Figure("takeover_next_phase_s", takeover, clone, 5.0, higher_is_better=False,
                     judged_on="value").result_line())
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
