"""Snapshots of a workspace on real git repositories, and their restoring on another machine
(another workspace root, sharing only the snapshot store)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime.errors import Permanent
from runtime.workspace import Workspaces, WorkspaceSpec
from runtime.workspace.sandbox import SandboxMode
from runtime.workspace.snapshots import Taken, Unchanged, Withheld, snapshot_ref
from tests.integration.test_workspace import make_bare_repo, sh

COMMIT = ("git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm")


@pytest.fixture(params=["none", "auto"])
def mode(request: pytest.FixtureRequest) -> SandboxMode:
    return request.param  # type: ignore[no-any-return]


class Record:
    """The database's record of each tree's latest snapshot (``runtime.store.owners``)."""

    def __init__(self) -> None:
        self.latest: dict[str, str] = {}

    async def of(self, root_id: str) -> str | None:
        return self.latest.get(root_id)


def _machine(tmp_path: Path, name: str, record: Record, mode: SandboxMode = "none") -> Workspaces:
    store = tmp_path / "shared" / "snapshots.git"
    return Workspaces(
        tmp_path / name / "workspaces", mode, snapshots=store, latest_snapshot=record.of
    )


def _machines(
    tmp_path: Path, mode: SandboxMode, record: Record | None = None
) -> tuple[Workspaces, Workspaces]:
    record = record or Record()
    return _machine(tmp_path, "a", record, mode), _machine(tmp_path, "b", record, mode)


async def test_a_workspace_is_restored_on_another_machine_as_it_was(
    tmp_path: Path, mode: SandboxMode
) -> None:
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    record = Record()
    first, second = _machines(tmp_path, mode, record)
    ws = await first.ensure(spec)
    sh("git", "checkout", "-q", "-b", "keel/t1", cwd=ws)
    (ws / "committed.txt").write_text("committed, not pushed\n")
    sh("git", "add", "committed.txt", cwd=ws)
    sh(*COMMIT, "local work", cwd=ws)
    (ws / "README.md").unlink()
    (ws / "new.txt").write_text("new\n")
    (ws / ".gitignore").write_text("*.log\n")
    (ws / "debug.log").write_text("ignored\n")
    status = sh("git", "status", "--porcelain", cwd=ws)
    assert first.snapshots is not None
    taken = await first.snapshots.take(ws, "t1", "a")
    assert isinstance(taken, Taken)
    record.latest["t1"] = taken.sha
    # The workspace's own state is untouched by the snapshot.
    assert sh("git", "status", "--porcelain", cwd=ws) == status
    assert sh("git", "rev-parse", "HEAD", cwd=ws) == taken.head

    restored = await second.ensure(spec)
    assert restored != ws
    assert sh("git", "status", "--porcelain", cwd=restored) == status
    assert sh("git", "rev-parse", "--abbrev-ref", "HEAD", cwd=restored) == "keel/t1"
    assert sh("git", "log", "-1", "--format=%s", cwd=restored) == "local work"
    assert (restored / "new.txt").read_text() == "new\n"
    assert not (restored / "README.md").exists()
    assert not (restored / "debug.log").exists()  # ignored files are not saved


async def test_an_unchanged_workspace_makes_no_new_snapshot(tmp_path: Path) -> None:
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    first, _ = _machines(tmp_path, "none")
    ws = await first.ensure(spec)
    assert first.snapshots is not None
    (ws / "a.txt").write_text("1\n")
    taken = await first.snapshots.take(ws, "t1", "a")
    assert isinstance(taken, Taken)
    again = await first.snapshots.take(ws, "t1", "a", (taken.sha, taken.tree))
    assert isinstance(again, Unchanged)
    (ws / "a.txt").write_text("2\n")
    changed = await first.snapshots.take(ws, "t1", "a", (taken.sha, taken.tree))
    assert isinstance(changed, Taken) and changed.tree != taken.tree
    stored = sh("git", "--git-dir", str(first.snapshots.path), "rev-parse", snapshot_ref("t1", "a"))
    assert stored == changed.sha


async def test_a_branch_name_the_sandbox_made_up_is_not_used(tmp_path: Path) -> None:
    """The branch is the sandbox's word: a name git would not take as a branch leaves the
    restored workspace detached at the snapshot's parent, nothing else."""
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    record = Record()
    first, second = _machines(tmp_path, "none", record)
    ws = await first.ensure(spec)
    (ws / "a.txt").write_text("1\n")
    assert first.snapshots is not None
    taken = await first.snapshots.take(ws, "t1", "a")
    assert isinstance(taken, Taken)
    store = first.snapshots.path
    # Rewrite the stored snapshot with a hostile trailer, as a sandbox could have.
    message = "keel: snapshot\n\nKeel-Branch: --upload-pack=touch /tmp/pwned\n"
    forged = subprocess.run(
        ["git", "--git-dir", str(store), "commit-tree", taken.tree, "-p", taken.head],
        input=message,
        capture_output=True,
        text=True,
        check=True,
        env={
            "GIT_AUTHOR_NAME": "x",
            "GIT_AUTHOR_EMAIL": "x@x",
            "GIT_COMMITTER_NAME": "x",
            "GIT_COMMITTER_EMAIL": "x@x",
            "PATH": "/usr/bin:/bin",
        },
    ).stdout.strip()
    sh("git", "--git-dir", str(store), "update-ref", snapshot_ref("t1", "a"), forged)
    record.latest["t1"] = forged
    restored = await second.ensure(spec)
    assert sh("git", "rev-parse", "--abbrev-ref", "HEAD", cwd=restored) == "HEAD"
    assert sh("git", "rev-parse", "HEAD", cwd=restored) == taken.head
    assert (restored / "a.txt").read_text() == "1\n"


async def test_a_machine_that_lost_the_tree_cannot_replace_the_new_owners_snapshot(
    tmp_path: Path,
) -> None:
    """Machine a's lease passed while a phase of its still ran: b took the tree over and
    saved its own snapshot, then a's late snapshot lands too. A third machine restores the
    snapshot the owner recorded (b's), not the one stored last."""
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    record = Record()
    first, second = _machines(tmp_path, "none", record)
    assert first.snapshots is not None and second.snapshots is not None
    on_a = await first.ensure(spec)
    (on_a / "work.txt").write_text("a's\n")
    early = await first.snapshots.take(on_a, "t1", "a")
    assert isinstance(early, Taken)
    record.latest["t1"] = early.sha
    on_b = await second.ensure(spec)
    assert (on_b / "work.txt").read_text() == "a's\n"
    (on_b / "work.txt").write_text("b's\n")
    owners = await second.snapshots.take(on_b, "t1", "b", (early.sha, early.tree))
    assert isinstance(owners, Taken)
    record.latest["t1"] = owners.sha
    (on_a / "work.txt").write_text("a's, late\n")
    late = await first.snapshots.take(on_a, "t1", "a", (early.sha, early.tree))
    assert isinstance(late, Taken)
    third = await _machine(tmp_path, "c", record).ensure(spec)
    assert (third / "work.txt").read_text() == "b's\n"


async def test_a_recorded_snapshot_missing_from_the_store_is_a_clear_error(
    tmp_path: Path,
) -> None:
    record = Record()
    record.latest["t1"] = "f" * 40
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    with pytest.raises(Permanent, match="not in the snapshot store"):
        await _machine(tmp_path, "a", record).ensure(spec)
    assert not (tmp_path / "a" / "workspaces" / "t1").exists()  # nothing half-made is kept


async def test_a_workspace_holding_a_secret_is_not_saved(tmp_path: Path) -> None:
    """A secret's value written into the workspace (a command that had it, say) never leaves
    for the shared store: the snapshot is withheld, naming the file, and the store keeps the
    previous one. Once the file no longer holds it, snapshots go on."""
    secret = "tok-" + "9f3e" * 8
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    first, _ = _machines(tmp_path, "auto")
    ws = await first.ensure(spec)
    assert first.snapshots is not None
    (ws / "a.txt").write_text("clean\n")
    clean = await first.snapshots.take(ws, "t1", "a", None, [secret])
    assert isinstance(clean, Taken)
    (ws / "config.env").write_text(f"TOKEN={secret}\n")
    held = await first.snapshots.take(ws, "t1", "a", (clean.sha, clean.tree), ["other", secret])
    assert held == Withheld(("config.env",))
    store = str(first.snapshots.path)
    assert sh("git", "--git-dir", store, "rev-parse", snapshot_ref("t1", "a")) == clean.sha
    every = ["git", "--git-dir", store, "cat-file", "--batch-all-objects", "--batch"]
    assert secret.encode() not in subprocess.run(every, capture_output=True, check=True).stdout
    (ws / "config.env").write_text("TOKEN=${TOKEN}\n")
    later = await first.snapshots.take(ws, "t1", "a", (clean.sha, clean.tree), [secret])
    assert isinstance(later, Taken)
