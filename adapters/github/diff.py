"""A pull request's changes as text: the file list with +/- counts, and a unified diff built
from the files' patches, assembled only up to a bound (a 5 MB diff is never held whole); and
which lines of each patch a review comment may sit on."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

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


_HUNK_HEAD = re.compile(r"^@@ -(?P<old>\d+)(?:,\d+)? \+(?P<new>\d+)(?:,\d+)? @@")


@dataclass(frozen=True, slots=True)
class DiffLines:
    """Where a review comment may sit in one file's patch: the line numbers of each side.

    GitHub takes a comment on any line a hunk shows: an added line on the RIGHT (the new
    file), a removed one on the LEFT (the old file), a context line on either side.
    """

    right: frozenset[int]
    left: frozenset[int]

    def has(self, line: int, side: str) -> bool:
        return line in (self.right if side == "RIGHT" else self.left)

    def shown(self, side: str) -> str:
        """The side's lines as ranges, for telling the model where it may comment."""
        return _ranges(sorted(self.right if side == "RIGHT" else self.left)) or "none"


def diff_lines(patch: str | None) -> DiffLines:
    right: set[int] = set()
    left: set[int] = set()
    old_line = new_line = 0
    for text in (patch or "").splitlines():
        head = _HUNK_HEAD.match(text)
        if head is not None:
            old_line, new_line = int(head["old"]), int(head["new"])
            continue
        marker = text[:1]
        if marker in ("-", " ", ""):
            left.add(old_line)
            old_line += 1
        if marker in ("+", " ", ""):
            right.add(new_line)
            new_line += 1
    return DiffLines(frozenset(right), frozenset(left))


def _ranges(lines: Sequence[int]) -> str:
    spans: list[list[int]] = []
    for line in lines:
        if spans and spans[-1][1] == line - 1:
            spans[-1][1] = line
        else:
            spans.append([line, line])
    return ", ".join(f"{a}-{b}" if a != b else str(a) for a, b in spans)
