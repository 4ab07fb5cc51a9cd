"""Which checkout a task works in: its root task's repository, cloned once per task tree
(on its pull request's branch when the task began on a pull request a task opened, or on
the branch the task it follows handed on).

A task's root names its repository (``owner/name``). A GitHub repository the App (or token)
reaches is cloned on demand from its clone URL with that installation's token, when the
``github.repositories`` allow-list admits it; ``workspace.repositories`` overrides the URL,
ref and token per repository (and is the only way to name a non-GitHub repository).
Children share their root's checkout. Git asks ``git_token`` at every push, so a task that
outlives its installation token pushes with a fresh one.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Protocol

from routing.repos import Named, named_in
from runtime.config import REVIEW_AGENT, RepositoryConfig
from runtime.errors import KeelError, NotFound, Permanent
from runtime.executor import handover
from runtime.ids import SignalId
from runtime.scheduler import Scheduler
from runtime.store import links, signals
from runtime.store.records import Task
from runtime.threads import GitHubIssue
from runtime.workspace import Workspaces, WorkspaceSpec
from runtime.workspace.egress import PACKAGE_REGISTRIES, Egress
from runtime.workspace.setup import SetupDefinition, SetupReport, Setups, Started

_GITHUB_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9-]*)/[A-Za-z0-9._-]+$")
_GLOB = re.compile(r"[*?\[\]]")
_SHA = re.compile(r"[0-9a-f]{40}")


class RepositoryHost(Protocol):
    """Where GitHub repositories come from (the GitHub client)."""

    async def clone_url(self, repo: str) -> str: ...

    async def git_token(self, repo: str) -> str | None: ...

    async def get_pull(self, repo: str, number: int) -> PullHead: ...


class PullHead(Protocol):
    @property
    def head_ref(self) -> str: ...

    @property
    def head_sha(self) -> str: ...


def allowed(repo: str, patterns: Sequence[str]) -> bool:
    """``repo`` matches the ``github.repositories`` allow-list (empty: everything)."""
    name = repo.lower()
    return not patterns or any(fnmatch.fnmatchcase(name, p.lower()) for p in patterns)


def is_github_name(repo: str) -> bool:
    """``repo`` reads as a GitHub ``owner/name``: one Keel can clone on demand."""
    return _GITHUB_NAME.match(repo) is not None


class Checkouts:
    """Task → workspace path (the executor's ``workspace_for``), task → GitHub name, and
    task → git token (the devbox's ``GitCredentials``)."""

    def __init__(
        self,
        workspaces: Workspaces,
        repositories: dict[str, RepositoryConfig],
        scheduler: Scheduler,
        *,
        host: RepositoryHost | None = None,
        allow: Sequence[str] = (),
        setups: Setups | None = None,
    ) -> None:
        self.workspaces = workspaces
        self.repositories = repositories
        self.scheduler = scheduler
        self.host = host
        self.allow = tuple(allow)
        self.setups = setups
        self._paths: dict[str, Path] = {}
        self._repos: dict[str, str | None] = {}

    def knows(self, repo: str) -> bool:
        """Whether a task may name ``repo``: a configured repository, or a GitHub repository
        the allow-list admits while GitHub is connected."""
        if repo in self.repositories:
            return True
        return self.host is not None and is_github_name(repo) and allowed(repo, self.allow)

    def offered(self) -> list[str]:
        """The repositories a person may pick for a request: the configured ones, and the
        allow-list's exact names while GitHub is connected. A pattern (``acme/*``) names no
        repository to offer: GitHub is never asked on the request path which ones it has."""
        github = [
            repo
            for repo in self.allow
            if self.host is not None and is_github_name(repo) and not _GLOB.search(repo)
        ]
        return sorted({*self.repositories, *github}, key=str.lower)

    async def workspace_for(self, task: Task) -> Path | None:
        if task.root_id in self._paths:
            return self._paths[task.root_id]
        root = task if task.task_id == task.root_id else await self.scheduler.get(task.root_id)
        key = root.repo if root else None
        if root is None or not key:
            return None
        override = self.repositories.get(key)
        if override is not None:
            spec = WorkspaceSpec(root.task_id, override.url, override.ref)
        elif self.host is not None and is_github_name(key) and allowed(key, self.allow):
            spec = WorkspaceSpec(root.task_id, await self.host.clone_url(key))
        else:
            return None
        branch = await self._pull_branch(root)
        token = await self._token(key)
        try:
            path = await self.workspaces.ensure(replace(spec, ref=branch or spec.ref), token)
        except NotFound:
            if branch is None:
                raise
            # The branch is gone (its pull request merged and the branch deleted): the work
            # goes on from the repository's own ref, as a first task's would.
            path = await self.workspaces.ensure(spec, token)
        self._paths[task.root_id] = path
        return path

    async def prepare(self, task: Task, started: Started | None = None) -> SetupReport | None:
        """The task's workspace, set up once (``runtime.workspace.setup``); None when the task
        has no workspace or setup steps are off."""
        path = await self.workspace_for(task)
        key = await self._repo_of(task.task_id)
        if path is None or key is None or self.setups is None:
            return None
        return await self.setups.prepare(path, self.setup_definition(key), started)

    def setup_definition(self, key: str) -> SetupDefinition:
        """How repository ``key`` is set up: its configuration, else the defaults (the
        repository's own script, the package registries, no secrets)."""
        repo = self.repositories.get(key)
        if repo is None:
            return SetupDefinition(key, egress=Egress("allowlist", PACKAGE_REGISTRIES))
        return SetupDefinition(
            key,
            command=repo.setup,
            timeout_s=repo.setup_timeout_s,
            maintenance=repo.maintenance,
            egress=Egress(repo.network, repo.allow if repo.network == "allowlist" else ()),
            secrets={name: s.value.get_secret_value() for name, s in repo.secrets.items()},
        )

    async def agent_secrets(self, task_id: str) -> dict[str, str]:
        """The repository's secrets its agent's commands may see (``agent: true``)."""
        key = await self._repo_of(task_id)
        repo = self.repositories.get(key) if key else None
        if repo is None:
            return {}
        return {n: s.value.get_secret_value() for n, s in repo.secrets.items() if s.agent}

    async def secret_values(self, task_id: str) -> list[str]:
        """Every secret value of the task's repository, whoever may see it: masked in all
        command output (a setup may leave a setup-only secret in the home)."""
        key = await self._repo_of(task_id)
        repo = self.repositories.get(key) if key else None
        return [s.value.get_secret_value() for s in repo.secrets.values()] if repo else []

    async def _pull_branch(self, root: Task) -> str | None:
        """The branch the task's work continues on, so its pushes follow that branch (and
        update its pull request) instead of starting over from the default: the branch of
        the pull request a task opened when the task began on it, else the branch the task
        it follows handed on (``runtime.executor.handover``). A branch or pull request the
        request itself named comes first."""
        requested = await self._requested_branch(root)
        if requested is not None:
            return requested
        origin = root.origin_thread_ref
        if isinstance(origin, GitHubIssue) and root.agent == REVIEW_AGENT:
            return await self._reviewed_head(origin)
        if isinstance(origin, GitHubIssue):
            link = await self.scheduler.db.read(
                lambda s: links.pull_link(s, origin.repo, origin.number)
            )
            if link is not None and link.head_ref:
                return link.head_ref
        handed = await handover.handed_on(self.scheduler, root)
        return handed.branch if handed is not None else None

    async def _reviewed_head(self, origin: GitHubIssue) -> str | None:
        """A review reads the code it reviews: the pull request's head commit, checked out
        detached (its branch may move while the review runs; the review is of this head).
        A fork's head is not in the repository's clone: the checkout then fails over to the
        repository's ref, and the review reads the diff it was given."""
        if self.host is None:
            return None
        try:
            head = (await self.host.get_pull(origin.repo, origin.number)).head_sha
        except KeelError:
            return None
        return head if _SHA.fullmatch(head) else None

    async def _requested_branch(self, root: Task) -> str | None:
        """``branch=`` or the head of the pull request linked in the request that created
        the task, read again from the stored request (``routing.repos.named_in``, as routing
        read it) when it is about the task's own repository."""
        key = root.child_key or ""
        if root.parent_id is not None or not key.startswith("signal:") or root.repo is None:
            return None
        signal_id = SignalId(key.removeprefix("signal:"))
        request = await self.scheduler.db.read(lambda s: signals.get_signal(s, signal_id))
        named = named_in(request.text) if request is not None else None
        if not isinstance(named, Named) or named.repo not in (None, root.repo):
            return None
        if named.pull is not None and self.host is not None:
            try:
                return (await self.host.get_pull(root.repo, named.pull)).head_ref
            except KeelError:
                return named.branch  # the pull request is gone: its repository's own ref
        return named.branch

    async def git_token(self, task_id: str, remote_url: str) -> str | None:
        """The token for the task's repository, fresh enough for the push about to happen."""
        key = await self._repo_of(task_id)
        return await self._token(key) if key else None

    async def _repo_of(self, task_id: str) -> str | None:
        """The repository key of the task's root (remembered: it never changes)."""
        if task_id not in self._repos:
            task = await self.scheduler.get(task_id)
            root = task if task is None or task.task_id == task.root_id else (
                await self.scheduler.get(task.root_id)
            )
            self._repos[task_id] = root.repo if root else None
        return self._repos[task_id]

    async def _token(self, key: str) -> str | None:
        override = self.repositories.get(key)
        if override is not None and override.token is not None:
            return override.token.get_secret_value()
        if self.host is not None and _GITHUB_NAME.match(key):
            return await self.host.git_token(key)
        return None

    async def discard(self, root_id: str) -> None:
        """Drop this machine's copy of the tree's workspace (``Workspaces.discard``): the
        next ``workspace_for`` makes it afresh, from the latest snapshot."""
        self._paths.pop(root_id, None)
        await self.workspaces.discard(root_id)

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
