"""Which checkout a task works in: its root task's repository, cloned once per task tree
(on its pull request's branch when the task began on a pull request a task opened).

``workspace.repositories`` maps a repository key (``owner/name``) to its clone URL, ref and
token; a task's root names the key. Children share their root's checkout.
"""

from __future__ import annotations

import re
from pathlib import Path

from runtime.config import RepositoryConfig
from runtime.errors import KeelError, Permanent
from runtime.scheduler import Scheduler
from runtime.store import links
from runtime.store.records import Task
from runtime.threads import GitHubIssue
from runtime.workspace import Workspaces, WorkspaceSpec

_GITHUB_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*)/[A-Za-z0-9._-]+$")


class Checkouts:
    """Task → workspace path (the executor's ``workspace_for``) and task → GitHub name."""

    def __init__(
        self,
        workspaces: Workspaces,
        repositories: dict[str, RepositoryConfig],
        scheduler: Scheduler,
    ) -> None:
        self.workspaces = workspaces
        self.repositories = repositories
        self.scheduler = scheduler
        self._paths: dict[str, Path] = {}

    async def workspace_for(self, task: Task) -> Path | None:
        if task.root_id in self._paths:
            return self._paths[task.root_id]
        root = task if task.task_id == task.root_id else await self.scheduler.get(task.root_id)
        repo = self.repositories.get(root.repo or "") if root else None
        if root is None or repo is None:
            return None
        token = repo.token.get_secret_value() if repo.token else None
        ref = await self._pull_branch(root) or repo.ref
        path = await self.workspaces.ensure(WorkspaceSpec(root.task_id, repo.url, ref), token)
        self._paths[task.root_id] = path
        return path

    async def _pull_branch(self, root: Task) -> str | None:
        """A task that began on a pull request a task opened works on that pull request's
        branch, so its pushes follow the branch instead of starting over from the default."""
        origin = root.origin_thread_ref
        if not isinstance(origin, GitHubIssue):
            return None
        link = await self.scheduler.db.read(
            lambda s: links.pull_link(s, origin.repo, origin.number)
        )
        return link.head_ref if link is not None and link.head_ref else None

    async def repo_full_name(self, task_id: str) -> str:
        task = await self.scheduler.get(task_id)
        name = task.repo if task else None
        if not name:
            raise KeelError("this task has no repository")
        return github_name(name)


def github_name(repo_key: str) -> str:
    """The GitHub ``owner/name`` of a repository: its configured key, never its clone URL.

    The URL may be a mirror, an SSH remote or a local path; only the key says which GitHub
    repository pull requests and comments belong to.
    """
    if not _GITHUB_NAME.match(repo_key):
        raise Permanent(
            f"repository {repo_key!r} has no GitHub name: key it as owner/name in "
            "workspace.repositories to use the GitHub tools"
        )
    return repo_key
