"""Attack 7 of issue #37: ``sandbox: auto`` fails closed.

Bubblewrap is installed but cannot start (a container's seccomp profile, user namespaces
forbidden: here a fake ``bwrap`` first on PATH that exits 1), or is not installed at all.
A command must not run (its marks never appear), Keel's own git in the workspace must not run
the workspace's configuration on the host instead, and the refusal must say what to fix.
Only an explicit ``sandbox: none`` runs commands unsandboxed.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from runtime.errors import KeelError
from runtime.tools.base import Completed
from runtime.tools.devbox import GitCommit, GitPush, RunCommand, WriteFile
from runtime.workspace import Sandbox, sandbox
from runtime.workspace.sandbox import SandboxMode
from tests.security.kit import (
    Host,
    Payloads,
    assert_clean,
    context,
    git_config_sh,
    make_origin,
    new_workspace,
    preview,
    run,
    save_work_in,
    settle,
    write_files_sh,
)

BROKEN_BWRAP = "#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n"


def _break_bwrap(folder: Path, monkeypatch: pytest.MonkeyPatch, installed: bool) -> None:
    """From now on ``bwrap`` on PATH cannot start (``installed``) or there is none at all;
    Keel's probe of it is forgotten, as in a fresh process."""
    folder.mkdir()
    if installed:
        fake = folder / "bwrap"
        fake.write_text(BROKEN_BWRAP)
        fake.chmod(0o755)
        monkeypatch.setenv("PATH", f"{folder}{os.pathsep}{os.environ['PATH']}")
    else:  # every other program of PATH, but no bwrap
        for directory in os.environ["PATH"].split(os.pathsep):
            if not os.path.isdir(directory):
                continue
            for name in os.listdir(directory):
                link = folder / name
                if name != "bwrap" and not os.path.lexists(link):
                    link.symlink_to(Path(directory) / name)
        monkeypatch.setenv("PATH", str(folder))
    monkeypatch.setattr(sandbox, "_bwrap_works", None)
    monkeypatch.setattr(sandbox, "_bwrap_problem", "", raising=False)


async def _refusal(call: Callable[[], Awaitable[Completed | str]]) -> str:
    """What a refused call said: its error result, or the error it raised."""
    try:
        async with asyncio.timeout(60):
            result = await call()
    except KeelError as e:
        return f"raised: {e}"
    return result if isinstance(result, str) else result.output


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
@pytest.mark.parametrize("installed", [True, False], ids=["broken", "missing"])
async def test_command_never_runs_unsandboxed_when_bubblewrap_cannot_start(
    tmp_path: Path, host: Host, monkeypatch: pytest.MonkeyPatch, mode: SandboxMode, installed: bool
) -> None:
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    _, ws = await new_workspace(tmp_path / "ws", str(origin), sandbox=mode)
    _break_bwrap(tmp_path / "fakebin", monkeypatch, installed)
    command = f"touch {ws}/ran-unsandboxed {host.drop}/ran-unsandboxed; env"
    tool = RunCommand(Sandbox(mode=mode))

    said = await _refusal(lambda: settle(tool, {"command": command}, context(ws)))

    time.sleep(0.3)  # a command started detached would have run by now
    assert not (ws / "ran-unsandboxed").exists(), f"the command ran unsandboxed: {said}"
    host.assert_untouched()
    assert_clean([said])
    assert "bubblewrap" in said and "workspace.sandbox" in said, said


async def test_keels_git_never_runs_the_workspace_config_on_the_host_without_bubblewrap(
    tmp_path: Path, host: Host, monkeypatch: pytest.MonkeyPatch, sqlite_url: str
) -> None:
    """A filter planted while bubblewrap worked; then it stops working (an upgrade, a new
    seccomp profile): git_commit, the preview, git_push and the save refuse rather than run
    the workspace's git on the host."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin), sandbox="auto")
    p = Payloads(ws)
    config = git_config_sh(
        [("filter.pwn.clean", p("no-bwrap-clean", "filter")), ("core.fsmonitor", p("no-bwrap-fs"))]
    )
    files = {**p.files(host), ".gitattributes": "* filter=pwn\n"}
    planted = await run(
        workspaces.sandbox, ws, write_files_sh(files, p.executables()) + "\n" + config
    )
    assert "exit code 0" in planted.output, planted.output
    await settle(WriteFile(), {"path": "a.txt", "content": "a\n"}, context(ws))
    _break_bwrap(tmp_path / "fakebin", monkeypatch, installed=True)

    said = [
        await _refusal(lambda: settle(GitCommit(), {"message": "a"}, context(ws))),
        await _refusal(lambda: preview(GitPush(), {"branch": "keel/x"}, context(ws))),
        await _refusal(lambda: settle(GitPush(), {"branch": "keel/x"}, context(ws))),
        await _refusal(lambda: save_work_in(sqlite_url, ws, GitCommit(), GitPush())),
    ]

    host.assert_untouched()
    assert_clean(said)


async def test_explicit_none_runs_commands_unsandboxed(tmp_path: Path, host: Host) -> None:
    """The control: what the marks look like when a command does run outside a sandbox."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    _, ws = await new_workspace(tmp_path / "ws", str(origin), sandbox="none")
    result = await run(Sandbox(mode="none"), ws, f"touch {ws}/ran-unsandboxed && echo ran")
    assert "ran" in result.output and (ws / "ran-unsandboxed").exists(), result.output


async def test_workspace_made_without_a_sandbox_gets_none_of_keels_git_on_the_host_once_on(
    tmp_path: Path, host: Host
) -> None:
    """A workspace cloned while ``workspace.sandbox`` was ``none`` (before bubblewrap was
    fixed, say), then Keel restarted with ``bwrap``: its commands are sandboxed now, and
    Keel's own git in it must be too, whatever the workspace was first made with."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    await new_workspace(tmp_path / "ws", str(origin), sandbox="none")
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin), sandbox="bwrap")
    p = Payloads(ws)
    config = git_config_sh([("filter.pwn.clean", p("upgraded-clean", "filter"))])
    files = {**p.files(host), ".gitattributes": "* filter=pwn\n"}
    planted = await run(
        workspaces.sandbox, ws, write_files_sh(files, p.executables()) + "\n" + config
    )
    assert "exit code 0" in planted.output, planted.output
    await settle(WriteFile(), {"path": "a.txt", "content": "a\n"}, context(ws))

    said = [
        await _refusal(lambda: settle(GitCommit(), {"message": "a"}, context(ws))),
        await _refusal(lambda: settle(GitPush(), {"branch": "keel/x"}, context(ws))),
    ]

    host.assert_untouched()
    assert_clean(said)
