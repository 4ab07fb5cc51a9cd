"""A repository's review rules, for its review tasks: ``REVIEW.md`` at the root of the default
branch, or else the ``## Review`` section of its ``AGENTS.md``.

They are read from Keel's mirror of the repository (``runtime/workspace/state.py``), at the
default branch the remote reported when it was cloned, with Keel's own git: never from the
workspace, which a sandboxed command may have changed, and never from the pull request under
review, whose author could otherwise rewrite the rules it is reviewed by. A file over
``RULES_LIMIT`` bytes is not read.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Protocol

from routing.reviews import is_review
from runtime.config import REVIEW_AGENT
from runtime.store.records import Task
from runtime.workspace.git import git
from runtime.workspace.state import WorkspaceState

RULES_LIMIT = 20_000
_BRANCH = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


class WorkspaceFinder(Protocol):
    async def workspace_for(self, task: Task) -> Path | None: ...


class ReviewRules:
    """A context source: the review rules, for a task that reviews a pull request."""

    def __init__(self, checkouts: WorkspaceFinder) -> None:
        self.checkouts = checkouts

    async def sections(self, task: Task) -> list[str]:
        if task.agent != REVIEW_AGENT and not is_review(task.message):
            return []
        workspace = await self.checkouts.workspace_for(task)
        if workspace is None:
            return []
        state = WorkspaceState(workspace)
        branch = (state.read_record() or {}).get("default_branch")
        if not isinstance(branch, str) or not _BRANCH.match(branch) or ".." in branch:
            return []
        rules = await _blob(state, branch, "REVIEW.md")
        source = f"REVIEW.md on {branch}"
        if rules is None:
            rules = review_section(await _blob(state, branch, "AGENTS.md") or "")
            source = f"the Review section of AGENTS.md on {branch}"
        if not rules or not rules.strip():
            return []
        return [f"Review rules of this repository ({source}):\n{rules.strip()}"]


async def _blob(state: WorkspaceState, branch: str, path: str) -> str | None:
    """The file at the branch's head in Keel's mirror, if it is there and small enough."""
    ref = f"refs/heads/{branch}:{path}"
    mirror = ["--git-dir", str(state.mirror)]
    size = await git([*mirror, "cat-file", "-s", ref])
    if not size.ok or not size.stdout.strip().isdigit():
        return None
    if int(size.stdout.strip()) > RULES_LIMIT:
        return f"({path} is over {RULES_LIMIT} bytes: not read)"
    found = await git([*mirror, "cat-file", "blob", ref])
    return found.stdout if found.ok else None


def review_section(markdown: str) -> str:
    """The body of the first heading named "Review" (any level), up to the next heading of
    the same or a higher level."""
    lines = markdown.splitlines()
    for start, line in enumerate(lines):
        heading = _HEADING.match(line)
        if heading and heading[2].strip().lower() in ("review", "code review", "reviews"):
            level, body = len(heading[1]), []
            for rest in lines[start + 1 :]:
                deeper = _HEADING.match(rest)
                if deeper and len(deeper[1]) <= level:
                    break
                body.append(rest)
            return "\n".join(body).strip()
    return ""
