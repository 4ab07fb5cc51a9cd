"""What a sandboxed command can see: its workspace and the toolchains, never Keel or its peers.

The acceptance of the confinement policy in runtime/workspace/sandbox.py, with the workspaces
(and the virtualenvs) both under /tmp, which the sandbox replaces with its own, and elsewhere.
Needs bubblewrap: skipped without it on a developer machine, a failure under CI.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from adapters.assembly import _keel_files
from adapters.config import load_config
from runtime.workspace import Workspaces
from runtime.workspace.sandbox import Sandbox, toolchain_roots
from runtime.workspace.state import WorkspaceState
from tests.host import require_bwrap, run_to_end


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    require_bwrap()


@pytest.fixture(params=["/tmp", "/var/tmp"])
def base(request: pytest.FixtureRequest) -> Iterator[Path]:
    """A scratch folder under /tmp (hidden by the sandbox's own /tmp) or elsewhere."""
    folder = Path(tempfile.mkdtemp(prefix="keel-confine-", dir=request.param))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def clone_into(workspaces: Workspaces, task: str) -> Path:
    path = workspaces.path_for(task)
    path.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", "-b", "main", str(path)], check=True)
    return path


async def run(sandbox: Sandbox, ws: Path, command: str) -> str:
    """The report of ``command`` without its first line, which quotes the command itself."""
    result = await run_to_end(sandbox, ws, command)
    assert result.output.startswith("$ "), result.output
    return result.output.split("\n", 1)[1]


async def test_other_workspace_unreadable_when_both_share_a_root(base: Path) -> None:
    workspaces = Workspaces(base / "workspaces", "bwrap")
    mine, theirs = clone_into(workspaces, "root-a"), clone_into(workspaces, "root-b")
    (theirs / "private.txt").write_text("task B's code\n")
    (mine / "mine.txt").write_text("task A's code\n")
    command = f"cat mine.txt; cat {theirs}/private.txt; echo ==; ls -A {theirs.parent}"
    output = await run(workspaces.sandbox, mine, command)
    reads, listing = output.split("==", 1)
    assert "task A's code" in reads
    assert "task B's code" not in reads
    assert "root-b" not in listing.split()
    assert "root-a" in listing.split()


async def test_keel_files_hidden_when_a_shown_path_contains_them(base: Path) -> None:
    """Even an extra read-only path that holds the database and config cannot reveal them."""
    data = base / "data"
    (data / "tools").mkdir(parents=True)
    (data / "tools" / "lint.txt").write_text("a toolchain file\n")
    config = data / "app.yaml"
    config.write_text("database:\n  url: sqlite:///" + str(data / "keel.db") + "\n")
    (data / "keel.db").write_text("every transcript\n")
    loaded = load_config(config)
    workspaces = Workspaces(
        data / "workspaces",
        "bwrap",
        readonly_paths=[data],
        hidden=_keel_files(loaded, loaded.database.url),
    )
    ws = clone_into(workspaces, "root-a")
    command = f"cat {data}/tools/lint.txt; cat {data}/keel.db; cat {config}; echo end"
    output = await run(workspaces.sandbox, ws, command)
    assert "a toolchain file" in output
    assert "every transcript" not in output
    assert "sqlite:///" not in output
    assert "end" in output


def test_keel_files_name_config_and_database(tmp_path: Path) -> None:
    config = tmp_path / "app.yaml"
    config.write_text("{}\n")
    files = _keel_files(load_config(config), f"sqlite:///{tmp_path}/keel.db")
    assert config in files
    assert tmp_path / "keel.db" in files and tmp_path / "keel.db-wal" in files
    assert _keel_files(load_config(config), "postgresql+psycopg://u@h/db") == [config]


async def test_host_home_and_secrets_unreadable(base: Path) -> None:
    workspaces = Workspaces(base / "workspaces", "bwrap")
    ws = clone_into(workspaces, "root-a")
    output = await run(
        workspaces.sandbox,
        ws,
        "ls -A /root; echo ==; ls -A /home; echo ==; cat /etc/shadow; echo ==; ls /var",
    )
    root_seen, home_seen, shadow, var = output.split("==")[:4]
    shown = toolchain_roots(os.environ.get("PATH", ""), ws)
    # /root holds, at most, the ancestors of toolchains on PATH (e.g. .pyenv), nothing else.
    allowed = {Path(r).relative_to("/root").parts[0] for r in shown if r.startswith("/root/")}
    if os.access("/root", os.R_OK):
        private = set(os.listdir("/root")) - allowed
        assert private, "the host's /root has nothing but toolchains; the test proves nothing"
        assert not private & set(root_seen.split())
    for name in os.listdir("/home"):
        assert name not in home_seen.split()
    assert "root:" not in shadow
    assert "lib" not in var.split()


async def test_git_pytest_and_repo_venv_work_when_sandboxed(
    base: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The configured toolchain (this test's own venv, with pytest) and one the repository
    makes for itself both work, wherever the venv and the workspace live."""
    toolchain = base / "checkout" / ".venv"
    subprocess.run(
        [sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", str(toolchain)],
        check=True,
    )
    monkeypatch.setenv("PATH", f"{toolchain / 'bin'}{os.pathsep}{os.environ['PATH']}")
    workspaces = Workspaces(base / "workspaces", "bwrap")
    ws = clone_into(workspaces, "root-a")
    (ws / "test_x.py").write_text("def test_ok():\n    assert 1 + 1 == 2\n")
    command = (
        "git add -A && git -c user.email=k@e -c user.name=k commit -qm x && git log --oneline"
        " && python3 -m pytest -q -p no:cacheprovider test_x.py"
        " && python3 -m venv --without-pip .venv"
        " && .venv/bin/python -c 'import sys; print(\"venv prefix\", sys.prefix)'"
        " && echo scratch > /tmp/scratch.txt && cat /tmp/scratch.txt"
    )
    output = await run(workspaces.sandbox, ws, command)
    assert "exit code 0 " in output, output
    assert "1 passed" in output
    assert f"venv prefix {ws}/.venv" in output
    assert (WorkspaceState(ws).tmp / "scratch.txt").read_text() == "scratch\n"


@pytest.mark.parametrize("home", ["/proc/bin", "/", "/sys", "/dev/bin", "{outside}/bin"])
def test_venv_in_workspace_adds_no_mount_whatever_it_names(tmp_path: Path, home: str) -> None:
    """A pyvenv.cfg is repository content: it never chooses what is mounted."""
    ws = tmp_path / "ws"
    outside = tmp_path / "pythons" / "3.11"
    (outside / "bin").mkdir(parents=True)
    for venv in (".venv", "tools", "a/b"):
        (ws / venv).mkdir(parents=True)
        (ws / venv / "pyvenv.cfg").write_text(f"home = {home.format(outside=outside)}\n")
    roots = toolchain_roots("/usr/bin", ws)
    assert str(outside) not in roots
    assert not any(r in ("/", "/proc", "/sys", "/dev") for r in roots)
    assert not any(r.startswith(str(ws)) for r in roots)


@pytest.mark.parametrize("named", ["/", "/proc", "/sys/kernel", "/dev"])
def test_host_views_never_shown_when_configured(tmp_path: Path, named: str) -> None:
    roots = toolchain_roots(f"{named}:/usr/bin", tmp_path / "ws", [Path(named)])
    assert not any(r == named or r.startswith(f"{named}/") or r == "/" for r in roots)


def test_readonly_paths_must_be_absolute(tmp_path: Path) -> None:
    config = tmp_path / "app.yaml"
    config.write_text("workspace:\n  readonly_paths: [relative/tools]\n")
    with pytest.raises(Exception, match=r"workspace.readonly_paths.*absolute"):
        load_config(config)
