"""The sandbox started ahead of a workspace's next send (``runtime.workspace.mirror``) is a
fresh sandbox like any other: it serves one send, nothing a send leaves running outlives it,
it is never used for a workspace folder or a record other than the one it was built from, and
what Keel hands it (a commit message) is data, never code.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

from runtime.tools.devbox import GitCommit, WriteFile
from runtime.workspace import Workspaces, WorkspaceSpec, mirror
from runtime.workspace.state import WorkspaceState
from tests.security.kit import (
    context,
    git_sh,
    make_origin,
    new_workspace,
    plant_filter,
    settle,
)


async def _commit(ws: Path, name: str, message: str = "m") -> str:
    await settle(WriteFile(), {"path": name, "content": f"{name}\n"}, context(ws))
    done = await settle(GitCommit(), {"message": message}, context(ws))
    assert not done.is_error and done.output.startswith("committed "), done.output
    return done.output.split()[1]


def _mirror(ws: Path) -> Path:
    return WorkspaceState(ws).mirror


async def test_nothing_a_send_starts_outlives_its_sandbox(tmp_path: Path) -> None:
    """A clean filter (run by git add in git_commit) leaves a process behind that ticks into
    the workspace's /tmp. Its sandbox ends with the send, and takes that process with it: the
    next send is not made where it still runs."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    await _commit(ws, "warm.txt")  # from here on a sender waits for this workspace
    linger = "(while :; do echo tick >> /tmp/linger.log; sleep 0.05; done) >/dev/null 2>&1 &\ncat\n"
    await plant_filter(workspaces.sandbox, ws, "linger", linger)
    await _commit(ws, "x.txt")
    log = WorkspaceState(ws).tmp / "linger.log"
    assert log.exists(), "the filter did not run: the test proves nothing"
    await asyncio.sleep(0.3)
    ticks = log.read_text().count("tick")
    await asyncio.sleep(0.5)
    assert log.read_text().count("tick") == ticks, "a process a send started is still running"


async def test_a_sender_is_used_only_for_the_folder_it_was_built_for(tmp_path: Path) -> None:
    """The workspace folder is replaced by another (a copy) while a sender waits, bound to the
    first: the next commit is made in the folder that is there now."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    _, ws = await new_workspace(tmp_path / "ws", str(origin))
    first = await _commit(ws, "a.txt")
    await asyncio.sleep(0.5)  # the sender has made its mounts: it holds the first folder
    old = ws.with_name("old-copy")
    os.rename(ws, old)
    shutil.copytree(old, ws, symlinks=True)
    second = await _commit(ws, "b.txt")
    assert (ws / ".git" / "refs" / "heads" / "main").read_text().strip() == second
    assert (old / ".git" / "refs" / "heads" / "main").read_text().strip() == first
    assert git_sh("--git-dir", str(_mirror(ws)), "cat-file", "-t", second) == "commit"


async def test_a_sender_built_under_another_record_is_not_used(tmp_path: Path) -> None:
    """A workspace made under ``sandbox: none`` has a sender waiting, with no sandbox at all;
    Keel restarts with bubblewrap, which rewrites its record. The next commit runs in a
    sandbox: the repository's filter cannot write outside the workspace."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    _, ws = await new_workspace(tmp_path / "ws", str(origin), sandbox="none")
    await _commit(ws, "a.txt")  # a sender with no sandbox waits
    confined = Workspaces(tmp_path / "ws", "bwrap")
    assert await confined.ensure(WorkspaceSpec("root-1", str(origin))) == ws
    escaped = tmp_path / "escaped"
    await plant_filter(confined.sandbox, ws, "out", f"touch {escaped}; cat\n")
    await _commit(ws, "b.txt")
    assert not escaped.exists(), "the commit ran in the sender built with no sandbox"


async def test_the_commit_message_is_data(tmp_path: Path) -> None:
    """The message travels on the sender's stdin after its request: shell syntax in it is
    committed as written and runs nothing."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    _, ws = await new_workspace(tmp_path / "ws", str(origin))
    await _commit(ws, "a.txt")
    message = "fix $(touch pwned-a) `touch pwned-b`\n\n'; touch pwned-c; ' tail"
    sha = await _commit(ws, "b.txt", message)
    body = git_sh("--git-dir", str(_mirror(ws)), "log", "-1", "--format=%B", sha)
    assert body.startswith("fix $(touch pwned-a) `touch pwned-b`\n\n'; touch pwned-c; '"), body
    assert not [p for p in ws.rglob("pwned-*")]
    assert not [p for p in WorkspaceState(ws).tmp.rglob("pwned-*")]


async def test_a_sender_that_died_waiting_is_replaced(tmp_path: Path) -> None:
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    _, ws = await new_workspace(tmp_path / "ws", str(origin))
    await _commit(ws, "a.txt")
    waiting = [s for key, s in mirror._waiting.items() if key == str(ws)]
    assert waiting, "no sender was started ahead for the workspace"
    waiting[0].process.popen.kill()
    waiting[0].process.popen.wait()
    sha = await _commit(ws, "b.txt")
    assert git_sh("--git-dir", str(_mirror(ws)), "cat-file", "-t", sha) == "commit"
