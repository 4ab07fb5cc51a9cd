"""Keel's own files for a workspace, kept beside it and never inside it.

Everything under a workspace may have been written by a sandboxed command or shipped by the
repository, so Keel keeps nothing there that it later reads, executes or binds into a
sandbox. Its per-workspace state lives in ``<root>/.keel-state/<name>/``, a folder no sandbox
can see (the leading dot keeps it apart from task ids, which start with a letter or digit):

- ``workspace.json``: what the workspace was cloned from, the push URL and the remote's
  default branch as the remote itself reported them at clone time;
- ``mirror.git``: a bare repository with a configuration Keel wrote, holding the objects Keel
  pushes; commits reach it only as pack data that ``git index-pack`` checks;
- ``tmp`` and ``home``: a command's ``/tmp`` and ``$HOME`` (bound into its sandbox);
- ``exec/<id>``: execution records, written by the wrapper outside the sandbox.

Every folder is made with ``mkdir`` and checked with ``lstat``: a path of Keel's that is a
symlink, or not a directory, is refused rather than followed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from runtime.errors import Permanent

STATE_FOLDER = ".keel-state"


class UnsafeState(Permanent):
    """A folder Keel owns is missing its guarantees (a symlink, or not a directory)."""


def state_dir(workspace: Path) -> Path:
    """Where Keel keeps the state of ``workspace``: beside it, outside every sandbox."""
    ws = workspace.absolute()
    return ws.parent / STATE_FOLDER / ws.name


@dataclass(frozen=True, slots=True)
class WorkspaceState:
    """The paths of one workspace's state; ``ensure`` creates them safely."""

    workspace: Path

    @property
    def root(self) -> Path:
        return state_dir(self.workspace)

    @property
    def tmp(self) -> Path:
        return self.root / "tmp"

    @property
    def home(self) -> Path:
        return self.root / "home"

    @property
    def exec_root(self) -> Path:
        return self.root / "exec"

    @property
    def mirror(self) -> Path:
        return self.root / "mirror.git"

    @property
    def record_path(self) -> Path:
        return self.root / "workspace.json"

    def ensure(self) -> WorkspaceState:
        """Create (or check) every folder; raises UnsafeState when one is not Keel's."""
        for folder in (self.root.parent, self.root, self.tmp, self.home, self.exec_root):
            ensure_real_dir(folder)
        return self

    def read_record(self) -> dict[str, Any] | None:
        try:
            record = json.loads(read_no_follow(self.record_path))
        except (OSError, ValueError):
            return None
        return record if isinstance(record, dict) else None

    def write_record(self, record: dict[str, Any]) -> None:
        ensure_real_dir(self.root)
        tmp = self.record_path.with_suffix(".tmp")
        tmp.unlink(missing_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump(record, f, indent=2)
        os.replace(tmp, self.record_path)


def ensure_real_dir(path: Path) -> None:
    """``path`` exists as a real directory (created if missing), never a symlink."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except FileNotFoundError:
        ensure_real_dir(path.parent)
        ensure_real_dir(path)
        return
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise UnsafeState(f"{path} is not a directory Keel made (a symlink or a file); refusing it")


def is_real_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except OSError:
        return False


def read_no_follow(path: Path) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    with os.fdopen(fd, "r") as f:
        return f.read()
