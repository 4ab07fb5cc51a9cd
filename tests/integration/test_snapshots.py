"""Snapshots of a workspace on real git repositories, and their restoring on another machine
(another workspace root, sharing only the snapshot store)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from runtime.workspace import Workspaces, WorkspaceSpec
from runtime.workspace.sandbox import SandboxMode
from runtime.workspace.snapshots import Taken, Unchanged
from tests.integration.test_workspace import make_bare_repo, sh

COMMIT = ("git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm")


@pytest.fixture(params=["none", "auto"])
def mode(request: pytest.FixtureRequest) -> SandboxMode:
    return request.param  # type: ignore[no-any-return]


def _machines(tmp_path: Path, mode: SandboxMode) -> tuple[Workspaces, Workspaces]:
    store = tmp_path / "shared" / "snapshots.git"
    return (
        Workspaces(tmp_path / "a" / "workspaces", mode, snapshots=store),
        Workspaces(tmp_path / "b" / "workspaces", mode, snapshots=store),
    )


async def test_a_workspace_is_restored_on_another_machine_as_it_was(
    tmp_path: Path, mode: SandboxMode
) -> None:
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    first, second = _machines(tmp_path, mode)
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
    taken = await first.snapshots.take(ws, "t1")
    assert isinstance(taken, Taken)
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
    taken = await first.snapshots.take(ws, "t1")
    assert isinstance(taken, Taken)
    again = await first.snapshots.take(ws, "t1", (taken.sha, taken.tree))
    assert isinstance(again, Unchanged)
    (ws / "a.txt").write_text("2\n")
    changed = await first.snapshots.take(ws, "t1", (taken.sha, taken.tree))
    assert isinstance(changed, Taken) and changed.tree != taken.tree
    assert await first.snapshots.latest("t1") == changed.sha


async def test_a_branch_name_the_sandbox_made_up_is_not_used(tmp_path: Path) -> None:
    """The branch is the sandbox's word: a name git would not take as a branch leaves the
    restored workspace detached at the snapshot's parent, nothing else."""
    spec = WorkspaceSpec("t1", str(make_bare_repo(tmp_path)))
    first, second = _machines(tmp_path, "none")
    ws = await first.ensure(spec)
    (ws / "a.txt").write_text("1\n")
    assert first.snapshots is not None
    taken = await first.snapshots.take(ws, "t1")
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
    sh("git", "--git-dir", str(store), "update-ref", "refs/keel/snapshots/t1", forged)
    restored = await second.ensure(spec)
    assert sh("git", "rev-parse", "--abbrev-ref", "HEAD", cwd=restored) == "HEAD"
    assert sh("git", "rev-parse", "HEAD", cwd=restored) == taken.head
    assert (restored / "a.txt").read_text() == "1\n"
