"""Confinement of tool paths to a workspace.

A path from the model is accepted only if it is relative and, with every symlink resolved,
still lies inside the workspace; Keel's own ``.keel/`` and git's ``.git/`` are off limits to
writes, since editing them would bypass the tools (hooks, config, execution records).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from runtime.errors import Permanent

PROTECTED = (".git", ".keel")


class PathRefused(Permanent):
    """A tool path that escapes the workspace or touches a protected folder."""


def resolve_inside(workspace: Path, path: str, *, for_write: bool = False) -> Path:
    """The real location of ``path`` inside ``workspace``, or PathRefused saying why not."""
    if not path or "\x00" in path:
        raise PathRefused("path must be a non-empty relative path")
    if PurePosixPath(path).is_absolute():
        raise PathRefused(f"{path!r} is absolute; give a path relative to the workspace")
    root = workspace.resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise PathRefused(f"{path!r} resolves outside the workspace (via '..' or a symlink)")
    relative = target.relative_to(root)
    if for_write and relative.parts and relative.parts[0] in PROTECTED:
        raise PathRefused(f"{path!r} is inside {relative.parts[0]}/, which tools may not edit")
    return target


def display(workspace: Path, target: Path) -> str:
    return str(target.relative_to(workspace.resolve())) or "."
