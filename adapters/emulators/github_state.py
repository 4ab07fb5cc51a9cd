"""The GitHub emulator's in-memory world: users, repositories, issues, pulls, checks, tokens.

Tests seed it with the helper methods and read it back (counters of created pulls and
comments per repository, the request log inherited from ``EmulatorState``).
"""

from __future__ import annotations

import hashlib
import itertools
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from adapters.emulators.faults import EmulatorState
from adapters.emulators.github_git import branch_of, init_bare_repository
from adapters.emulators.github_hooks import HookLog

UserKind = Literal["User", "Bot", "Organization"]
Permission = Literal["admin", "maintain", "write", "triage", "read", "none"]
CheckState = Literal[
    "success",
    "failure",
    "neutral",
    "cancelled",
    "skipped",
    "timed_out",
    "action_required",
    "queued",
    "in_progress",
    "pending",
]
StatusState = Literal["success", "failure", "error", "pending"]
Side = Literal["LEFT", "RIGHT"]
ReviewState = Literal["APPROVED", "CHANGES_REQUESTED", "COMMENTED", "PENDING"]
_RUNNING: frozenset[str] = frozenset({"queued", "in_progress", "pending"})


@dataclass(slots=True)
class GitHubUser:
    login: str
    user_id: int
    kind: UserKind = "User"


@dataclass(slots=True)
class Issue:
    number: int
    issue_id: int
    title: str
    body: str | None
    user: GitHubUser
    created_at: float
    labels: list[str] = field(default_factory=list)
    state: Literal["open", "closed"] = "open"
    is_pull: bool = False
    comment_ids: list[int] = field(default_factory=list)


@dataclass(slots=True)
class IssueComment:
    comment_id: int
    issue_number: int
    body: str
    user: GitHubUser
    created_at: float
    updated_at: float


@dataclass(slots=True)
class PullFile:
    """One changed file of a pull request, as the files endpoint lists it."""

    filename: str
    status: Literal["added", "removed", "modified", "renamed"]
    additions: int
    deletions: int
    patch: str | None


@dataclass(slots=True)
class ReviewComment:
    """A comment on a line of a pull request's diff; replies name the thread's first one."""

    comment_id: int
    pull_number: int
    path: str
    line: int
    diff_hunk: str
    body: str
    user: GitHubUser
    commit_id: str
    created_at: float
    in_reply_to: int | None = None
    review_id: int | None = None  # the review it was posted in (a reply has its own)
    side: Side = "RIGHT"


@dataclass(slots=True)
class Review:
    """A submitted (or pending) pull request review; its inline comments name it."""

    review_id: int
    pull_number: int
    body: str
    state: ReviewState
    user: GitHubUser
    commit_id: str
    submitted_at: float


@dataclass(slots=True)
class PullRequest:
    number: int
    pull_id: int
    title: str
    body: str | None
    user: GitHubUser
    head_owner: str
    head_ref: str
    head_sha: str
    base_ref: str
    base_sha: str
    created_at: float
    draft: bool = False
    state: Literal["open", "closed"] = "open"
    merged: bool = False
    files: list[PullFile] = field(default_factory=list)


@dataclass(slots=True)
class CheckRun:
    check_id: int
    name: str
    head_sha: str
    status: Literal["queued", "in_progress", "completed"]
    conclusion: str | None
    started_at: float


@dataclass(slots=True)
class CommitStatus:
    status_id: int
    context: str
    state: StatusState
    created_at: float


@dataclass(slots=True)
class Reaction:
    reaction_id: int
    content: str
    user: GitHubUser
    subject: tuple[Literal["issue", "comment", "review_comment"], int]
    created_at: float


@dataclass(slots=True)
class Repo:
    owner: GitHubUser
    name: str
    repo_id: int
    default_branch: str = "main"
    private: bool = False
    issues: dict[int, Issue] = field(default_factory=dict)
    comments: dict[int, IssueComment] = field(default_factory=dict)
    pulls: dict[int, PullRequest] = field(default_factory=dict)
    permissions: dict[str, Permission] = field(default_factory=dict)
    branches: dict[str, str] = field(default_factory=dict)
    checks: dict[str, list[CheckRun]] = field(default_factory=dict)
    # GitHub Actions job logs by job id (an Actions check run's id is its job's).
    job_logs: dict[int, str] = field(default_factory=dict)
    statuses: dict[str, list[CommitStatus]] = field(default_factory=dict)
    reactions: list[Reaction] = field(default_factory=list)
    review_comments: dict[int, ReviewComment] = field(default_factory=dict)
    reviews: dict[int, Review] = field(default_factory=dict)
    # What GitHub's compare answers for (base sha, head sha): the files changed between.
    comparisons: dict[tuple[str, str], list[PullFile]] = field(default_factory=dict)
    created_pulls: int = 0
    created_comments: int = 0
    # Where branch heads really live (e.g. a local bare git repository in the demo).
    resolve_branch: Callable[[str], str | None] | None = None
    # The bare repository the emulator's git remote serves (``add_git_repo``).
    git_dir: Path | None = None
    # The App installation that can reach this repository; None: the default installation.
    installation_id: int | None = None

    @property
    def full_name(self) -> str:
        return f"{self.owner.login}/{self.name}"

    def next_number(self) -> int:
        return max([0, *self.issues]) + 1

    def branch_sha(self, branch: str) -> str:
        """The branch's head; a branch nobody set gets a stable sha from its name."""
        if branch not in self.branches and self.resolve_branch is not None:
            found = self.resolve_branch(branch)
            if found:
                return found
        return self.branches.setdefault(branch, hashlib.sha1(branch.encode()).hexdigest())


@dataclass(slots=True)
class IssuedToken:
    token: str
    login: str
    expires_at: float | None = None
    installation_id: int | None = None
    expired: bool = False

    def valid(self, now: float) -> bool:
        return not self.expired and (self.expires_at is None or self.expires_at > now)


@dataclass(slots=True)
class GitHubState(EmulatorState):
    """One GitHub: the app Keel runs as, its installation, and seeded repositories."""

    app_id: int = 4242
    app_slug: str = "keel"
    installation_id: int = 4343
    app_public_key: str | None = None
    token_ttl_s: float = 3600.0
    users: dict[str, GitHubUser] = field(default_factory=dict)
    repos: dict[str, Repo] = field(default_factory=dict)
    tokens: dict[str, IssuedToken] = field(default_factory=dict)
    # Installations beyond the default one: id → the account it is installed on.
    installations: dict[int, str] = field(default_factory=dict)
    git_root: Path | None = None
    git_refusals: int = 0  # git requests answered 401
    hooks: HookLog = field(default_factory=HookLog)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1001))

    @property
    def bot_login(self) -> str:
        return f"{self.app_slug}[bot]"

    def next_id(self) -> int:
        return next(self._ids)

    def add_user(self, login: str, kind: UserKind = "User") -> GitHubUser:
        user = self.users.get(login) or GitHubUser(login, self.next_id(), kind)
        self.users[login] = user
        return user

    def add_token(self, token: str, login: str) -> None:
        """A personal access token acting as ``login``."""
        self.add_user(login)
        self.tokens[token] = IssuedToken(token, login)

    def issue_installation_token(self, installation_id: int) -> IssuedToken:
        self.add_user(self.bot_login, "Bot")
        token = IssuedToken(
            token=f"ghs_{secrets.token_hex(18)}",
            login=self.bot_login,
            expires_at=time.time() + self.token_ttl_s,
            installation_id=installation_id,
        )
        self.tokens[token.token] = token
        return token

    def installation_of(self, full_name: str) -> int:
        repo = self.repos[full_name]
        return repo.installation_id if repo.installation_id is not None else self.installation_id

    def token_reaches(self, issued: IssuedToken, full_name: str) -> bool:
        """An installation token reaches its installation's repositories; a PAT reaches all."""
        if issued.installation_id is None:
            return True
        return full_name in self.repos and self.installation_of(full_name) == issued.installation_id

    def add_installation(self, installation_id: int, account: str) -> None:
        self.add_user(account, "Organization")
        self.installations[installation_id] = account

    def add_git_repo(
        self,
        full_name: str,
        root: Path,
        *,
        files: dict[str, str] | None = None,
        installation_id: int | None = None,
        default_branch: str = "main",
    ) -> Repo:
        """A repository with a real bare git repository behind ``{url}/{full_name}.git``."""
        if self.git_root is None:
            self.git_root = root
        elif self.git_root != root:
            raise ValueError(f"git repositories live under {self.git_root}, not {root}")
        repo = self.repos.get(full_name) or self.add_repo(full_name, default_branch=default_branch)
        repo.installation_id = installation_id
        repo.git_dir = init_bare_repository(root, full_name, files or {}, default_branch)
        bare = repo.git_dir
        repo.branches.pop(default_branch, None)
        repo.resolve_branch = lambda branch: branch_of(bare, branch)
        return repo

    def expire_token(self, token: str | None = None) -> None:
        """Make one token (or every token) answer 401 from now on."""
        for issued in self.tokens.values():
            if token in (None, issued.token):
                issued.expired = True

    def add_repo(self, full_name: str, *, default_branch: str = "main") -> Repo:
        owner_login, name = full_name.split("/", 1)
        repo = Repo(self.add_user(owner_login), name, self.next_id(), default_branch)
        repo.branch_sha(default_branch)
        self.repos[full_name] = repo
        return repo

    def add_issue(
        self, full_name: str, title: str, body: str = "", *, user: str, labels: tuple[str, ...] = ()
    ) -> int:
        repo = self.repos[full_name]
        issue = Issue(
            repo.next_number(),
            self.next_id(),
            title,
            body,
            self.add_user(user),
            time.time(),
            labels=list(labels),
        )
        repo.issues[issue.number] = issue
        return issue.number

    def add_comment(
        self, full_name: str, number: int, body: str, *, user: str, comment_id: int | None = None
    ) -> int:
        """A comment as if a person had written it (not counted in ``comments_created``);
        ``comment_id`` gives it the id a webhook payload made elsewhere names."""
        repo, now = self.repos[full_name], time.time()
        found_id = comment_id if comment_id is not None else self.next_id()
        comment = IssueComment(found_id, number, body, self.add_user(user), now, now)
        repo.comments[comment.comment_id] = comment
        repo.issues[number].comment_ids.append(comment.comment_id)
        return comment.comment_id

    def add_pull(
        self,
        full_name: str,
        title: str,
        body: str = "",
        *,
        user: str,
        head: str,
        base: str = "main",
        files: tuple[PullFile, ...] = (),
    ) -> int:
        """A pull request as if a person had opened it (not counted in ``pulls_created``)."""
        repo, now = self.repos[full_name], time.time()
        author = self.add_user(user)
        number = repo.next_number()
        pull = PullRequest(
            number, self.next_id(), title, body, author, repo.owner.login, head,
            repo.branch_sha(head), base, repo.branch_sha(base), now, files=list(files),
        )
        repo.pulls[number] = pull
        repo.issues[number] = Issue(number, pull.pull_id, title, body, author, now, is_pull=True)
        return number

    def add_review_comment(
        self,
        full_name: str,
        number: int,
        body: str,
        *,
        user: str,
        path: str,
        line: int,
        diff_hunk: str,
        in_reply_to: int | None = None,
    ) -> int:
        """A comment on a line of the pull request's diff, or a reply in its thread."""
        repo = self.repos[full_name]
        pull = repo.pulls[number]
        comment = ReviewComment(
            self.next_id(), number, path, line, diff_hunk, body, self.add_user(user),
            pull.head_sha, time.time(), in_reply_to,
        )
        repo.review_comments[comment.comment_id] = comment
        return comment.comment_id

    def push_to_pull(
        self,
        full_name: str,
        number: int,
        sha: str,
        files: tuple[PullFile, ...],
        *,
        changed: tuple[PullFile, ...] = (),
    ) -> None:
        """A new head on the pull request's branch (a ``synchronize``): the pull request's
        diff is now ``files``, and comparing the old head with the new one gives ``changed``."""
        repo = self.repos[full_name]
        pull = repo.pulls[number]
        repo.comparisons[(pull.head_sha, sha)] = list(changed)
        pull.head_sha = sha
        pull.files = list(files)
        repo.branches[pull.head_ref] = sha

    def reviews_of(self, full_name: str, number: int) -> list[Review]:
        repo = self.repos[full_name]
        return [r for r in repo.reviews.values() if r.pull_number == number]

    def set_permission(self, full_name: str, login: str, permission: Permission) -> None:
        self.add_user(login)
        self.repos[full_name].permissions[login] = permission

    def set_job_log(self, full_name: str, job_id: int, text: str) -> None:
        self.repos[full_name].job_logs[job_id] = text

    def set_branch(self, full_name: str, branch: str, sha: str) -> None:
        self.repos[full_name].branches[branch] = sha

    def set_checks(self, full_name: str, sha: str, runs: list[tuple[str, CheckState]]) -> None:
        """Replace the check runs on ``sha``: ``[("test", "success"), ("lint", "in_progress")]``."""
        self.repos[full_name].checks[sha] = [
            CheckRun(
                self.next_id(),
                name,
                sha,
                "in_progress" if outcome in _RUNNING else "completed",
                None if outcome in _RUNNING else outcome,
                time.time(),
            )
            for name, outcome in runs
        ]

    def set_statuses(
        self, full_name: str, sha: str, statuses: list[tuple[str, StatusState]]
    ) -> None:
        self.repos[full_name].statuses[sha] = [
            CommitStatus(self.next_id(), context, state, time.time()) for context, state in statuses
        ]

    def pulls_created(self, full_name: str) -> int:
        return self.repos[full_name].created_pulls

    def comments_created(self, full_name: str) -> int:
        return self.repos[full_name].created_comments


_HUNK = re.compile(r"^@@ -(\d+)(?:,\d+)? \+(\d+)(?:,\d+)? @@")


def diff_lines(patch: str | None) -> set[tuple[Side, int]]:
    """The (side, line) pairs of a file's patch a review comment may sit on: every line of
    its hunks, removed lines on the LEFT, added lines on the RIGHT, context lines on both."""
    found: set[tuple[Side, int]] = set()
    old = new = 0
    for text in (patch or "").splitlines():
        hunk = _HUNK.match(text)
        if hunk:
            old, new = int(hunk[1]), int(hunk[2])
        elif text.startswith("-"):
            found.add(("LEFT", old))
            old += 1
        elif text.startswith("+"):
            found.add(("RIGHT", new))
            new += 1
        elif not text.startswith("\\"):
            found |= {("LEFT", old), ("RIGHT", new)}
            old, new = old + 1, new + 1
    return found
