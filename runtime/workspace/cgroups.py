"""A cap on how many processes one sandboxed run may have at once.

A PID namespace hides the host's processes but does not bound how many a command starts, and
RLIMIT_NPROC does not bind a sandbox of Keel running as root (its user namespace maps it to
root, which the limit exempts): a fork bomb would take the host's whole pid space, and with it
Keel's own git and every other task's commands. Where Keel may create cgroups (a ``pids``
controller it can write: cgroup v1's ``pids`` hierarchy, or cgroup v2 with ``pids``
available), each run joins a group of its own under ``keel/`` whose ``pids.max`` is
``PIDS_MAX``, before it starts the sandbox. Elsewhere (no controller, or no right to use it)
runs go uncapped, as before; ``available()`` says which.

Written by hand: the kernel interface is a few files, and no maintained library wraps both
cgroup versions for a process that is not systemd.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import shlex
import time
from pathlib import Path

log = logging.getLogger(__name__)

PIDS_MAX = 1024
_SWEEP_AFTER_S = 2.0  # far longer than a wrapper takes to join its new group
_V1 = Path("/sys/fs/cgroup/pids")
_V2 = Path("/sys/fs/cgroup")


@functools.cache
def _parent() -> Path | None:
    """Keel's own group under a writable pids controller, made once per process."""
    try:
        if (_V1 / "cgroup.procs").is_file() and os.access(_V1, os.W_OK):
            parent = _V1 / "keel"
            parent.mkdir(exist_ok=True)
            return parent
        controllers = (_V2 / "cgroup.controllers").read_text().split()
        if "pids" in controllers and os.access(_V2, os.W_OK):
            (_V2 / "cgroup.subtree_control").write_text("+pids")
            parent = _V2 / "keel"
            parent.mkdir(exist_ok=True)
            (parent / "cgroup.subtree_control").write_text("+pids")
            return parent
    except OSError as e:
        log.info("no pids cgroup for sandboxed runs (%s): process counts are not capped", e)
    return None


def available() -> bool:
    return _parent() is not None


def make_group(name: str) -> Path | None:
    """A fresh group capped at ``PIDS_MAX`` processes, or None where none can be made."""
    parent = _parent()
    if parent is None:
        return None
    sweep()
    group = parent / name
    try:
        group.mkdir(exist_ok=True)
        (group / "pids.max").write_text(str(PIDS_MAX))
    except OSError as e:
        log.warning("could not make the pids cgroup %s: %s", group, e)
        return None
    return group


def join_line(group: Path | None) -> str:
    """The shell line by which a wrapper moves itself (and so all it starts) into ``group``."""
    if group is None:
        return ":"
    return f"echo $$ > {shlex.quote(str(group / 'cgroup.procs'))}"


def leave_line(group: Path | None) -> str:
    """The shell line by which a wrapper leaves ``group`` once its command has ended, so the
    group can be removed as soon as the command's last process is gone."""
    if group is None:
        return ":"
    return f"echo $$ > {shlex.quote(str(group.parent / 'cgroup.procs'))} 2>/dev/null"


def sweep() -> None:
    """Remove every group of Keel's that no process is in any more (best effort), except
    those made in the last ``_SWEEP_AFTER_S``: a group is empty between its making and the
    moment its process joins it, and one swept then would leave that process uncapped."""
    parent = _parent()
    if parent is None:
        return
    settled = time.time() - _SWEEP_AFTER_S
    with contextlib.suppress(OSError):
        for group in parent.iterdir():
            with contextlib.suppress(OSError):
                if group.is_dir() and group.stat().st_mtime < settled:
                    remove_group(group)


def existing_group(name: str) -> Path | None:
    parent = _parent()
    return parent / name if parent is not None else None


def remove_group(group: Path | None) -> None:
    """Best effort: a group still holding a process stays until a later removal."""
    if group is not None:
        with contextlib.suppress(OSError):
            group.rmdir()
