"""What the GitHub tools share: the client, the task's repository, and their call markers.

Every GitHub tool finishes its work inside ``start`` (``wait_for_ci`` excepted), so ``poll``
has nothing to look at; a read is repeated after a crash rather than reconciled. Writes mark
what they post with the call's id, so a lost response is found again instead of repeated,
and pass the agent's text through ``markdown.py`` first, so a tool pings nobody Keel would
not.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection
from typing import Any, ClassVar

from adapters.github.client import GitHubClient
from runtime.errors import KeelError
from runtime.tools.base import Completed, Effect, Pending, ToolContext, Unknown
from runtime.workspace.git import is_sha, workspace_git

RepoFor = Callable[[str], Awaitable[str]]
"""The ``owner/name`` a task works on, given its task id."""


def fixed_repo(full_name: str) -> RepoFor:
    async def repo_for(task_id: str) -> str:
        return full_name

    return repo_for


class GitHubTool:
    """A tool of one GitHub client, working on the repository of the task that calls it."""

    name: ClassVar[str]
    description: ClassVar[str]
    parameters: ClassVar[dict[str, Any]]
    effect: ClassVar[Effect]

    def __init__(
        self, client: GitHubClient, repo_for: RepoFor, *, allowed_mentions: Collection[str] = ()
    ) -> None:
        self.client = client
        self.repo_for = repo_for
        # What the agent writes pings nobody but these (github.allowed_mentions).
        self.allowed_mentions = frozenset(allowed_mentions)

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Completed(f"{self.name} has no background work to poll", is_error=True)


class GitHubRead(GitHubTool):
    effect: ClassVar[Effect] = "read"

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("reads are repeated, not reconciled")


def call_key(ctx: ToolContext) -> str:
    """The key a write's marker carries: the call id, stable across recovery."""
    return f"call:{ctx.call_id}"


async def workspace_head(ctx: ToolContext) -> str | None:
    """The sha the task's workspace has checked out, if it has one (read inside the sandbox,
    like every git that reads a workspace)."""
    if ctx.workspace is None:
        return None
    try:
        found = await workspace_git(ctx.workspace, ["rev-parse", "--verify", "-q", "HEAD"])
    except KeelError:
        return None
    sha = found.stdout.strip()
    return sha if found.ok and is_sha(sha) else None
