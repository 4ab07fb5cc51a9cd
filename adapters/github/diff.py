"""A pull request's changes as text: the file list with +/- counts, and a unified diff built
from the files' patches, assembled only up to a bound (a 5 MB diff is never held whole)."""

from __future__ import annotations

from collections.abc import Sequence

from adapters.github.reads import FileChange

_STATUS = {"added": "A", "removed": "D", "modified": "M", "renamed": "R"}


def changed_files(files: Sequence[FileChange]) -> str:
    return "\n".join(
        f"{_STATUS.get(f.status, '?')} {f.filename} +{f.additions} -{f.deletions}" for f in files
    )


def unified_diff(files: Sequence[FileChange], limit: int) -> str:
    """``git diff``-shaped text of ``files``, cut at whole lines within ``limit`` characters."""
    lines: list[str] = []
    size = 0
    for index, change in enumerate(files):
        for line in _file_lines(change):
            if size + len(line) + 1 > limit:
                rest = len(files) - index - 1
                return "\n".join([*lines, f"… diff cut here; {rest} more file(s) not shown"])
            lines.append(line)
            size += len(line) + 1
    return "\n".join(lines)


def _file_lines(change: FileChange) -> list[str]:
    name = change.filename
    head = [f"diff --git a/{name} b/{name}", f"--- a/{name}", f"+++ b/{name}"]
    if change.patch is None:
        return [*head, "(GitHub sends no patch for this file: binary or too large)"]
    return head + change.patch.splitlines()
