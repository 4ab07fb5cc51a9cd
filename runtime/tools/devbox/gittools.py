"""Devbox git tools: git_commit and git_push, both writes that can be reconciled.

A commit carries a ``Keel-Call: <call id>`` trailer, so recovery finds it in the history
instead of committing twice. Everything that reads the workspace's repository (add, commit,
log, rev-parse) runs inside the sandbox through ``workspace_git``: the workspace's ``.git``
is the sandbox's to write, so Keel's own git never reads it. A push moves the commit's
objects into Keel's mirror as checked pack data and pushes from there, to the URL Keel cloned
from, whatever the workspace's remotes say. It never forces, refuses protected branches (the
remote's default branch as the remote reported it at clone, main, master) unless allowed, and
is read back with ``ls-remote``.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from runtime.errors import Permanent
from runtime.evidence import EvidenceItem, Strength
from runtime.tools.base import Completed, Effect, Started, ToolContext, Unknown
from runtime.tools.devbox.calls import ToolArgs, prepare, refused, schema
from runtime.workspace.git import (
    git,
    head_named_by_files,
    is_sha,
    uses_https,
    workspace_git,
    workspace_run,
)
from runtime.workspace.mirror import COMMIT_AND_SEND, import_head, in_mirror, send_to_mirror
from runtime.workspace.state import WorkspaceState, read_no_follow

IMPORTED = "imported"  # beside mirror.git: the last commit sent into it
PINNED = "pinned"  # beside mirror.git: per push call, the commit its approval preview showed


def _call_key(ctx: ToolContext) -> str:
    return hashlib.sha256(f"{ctx.task_id}\0{ctx.call_id}".encode()).hexdigest()[:32]


def _write_private(path: Path, sha: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(f"{sha}\n")
    os.replace(tmp, path)

TRAILER = "Keel-Call"
ALWAYS_PROTECTED = frozenset({"main", "master"})


class GitCredentials(Protocol):
    """The token for a task's remote, asked for at each push so a long task gets a fresh one.

    None when the remote needs none (or Keel has none for it). Raises ``KeelError`` when the
    token could not be obtained.
    """

    async def git_token(self, task_id: str, remote_url: str) -> str | None: ...


_AUTH_FAILURES = (
    "authentication failed",
    "could not read username",
    "could not read password",
    "invalid username or password",
    "403",
)


class CommitArgs(ToolArgs):
    message: str = Field(min_length=1, description="the commit message")


class PushArgs(ToolArgs):
    branch: str = Field(min_length=1, description="remote branch to push the current HEAD to")


_HEAD = "git rev-parse HEAD --abbrev-ref HEAD"
# git commit exits 1 and says "nothing to commit" when the index matches HEAD.
_COMMIT = f"git add --all && git commit --quiet --no-verify -F - && {_HEAD}"
_NOTHING = "nothing to commit"


async def head(ws: Path) -> tuple[str, str]:
    """(sha, branch) of HEAD, read inside the sandbox; the branch is ``HEAD`` when detached,
    and the sha empty when there is no commit (or the sandboxed git printed no sha)."""
    return _parse_head((await workspace_git(ws, _HEAD.split()[1:])).stdout)


def _parse_head(stdout: str) -> tuple[str, str]:
    lines = stdout.strip().splitlines()
    if len(lines) < 2 or not is_sha(lines[-2].strip()):
        return "", "HEAD"
    return lines[-2].strip(), lines[-1].strip()[:255] or "HEAD"


def commit_evidence(sha: str, branch: str) -> EvidenceItem:
    return EvidenceItem(
        kind="commit",
        ref=sha,
        strength=Strength.tool_reported,
        detail={"sha": sha, "branch": branch},
    )


class GitCommit:
    name = "git_commit"
    description = "Commit every change in the workspace (new, modified and deleted files)."
    parameters = schema(CommitArgs)
    effect: Effect = "write"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        prepared = prepare(CommitArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        message = f"{parsed.message.rstrip()}\n\n{TRAILER}: {ctx.call_id}\n".encode()
        try:
            remote: Remote | None = Remote.of(ws)
        except Permanent:
            remote = None  # not a clone of Keel's: the commit stays in the workspace
        if remote is None:
            result = await workspace_run(ws, ["bash", "-c", _COMMIT], stdin=message)
            said, (sha, branch) = result.stdout, _parse_head(result.stdout)
        else:
            # The same sandbox sends the new commit to Keel's mirror, so a push that follows
            # finds it there.
            sent = await send_to_mirror(
                ws, remote.mirror, COMMIT_AND_SEND, known=remote.known, stdin=message
            )
            if sent.imported:
                remote.remember(sent.sha)
            result, said, sha, branch = sent.result, sent.result.stderr, sent.sha, sent.branch
        if result.returncode == 1 and _NOTHING in said:
            return refused("nothing to commit: the workspace has no changes")
        if not result.ok or not sha:
            return refused(f"git commit failed:\n{result.stderr.strip()[-2000:]}")
        return Completed(
            output=f"committed {sha} on {branch}", evidence=(commit_evidence(sha, branch),)
        )

    async def poll(self, handle: str, ctx: ToolContext) -> Completed:
        return refused(f"{handle!r}: git_commit has no pending work to poll")

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """Committed if a recent commit carries this call's trailer."""
        prepared = prepare(CommitArgs, args, ctx)
        if isinstance(prepared, Completed):
            return Unknown(prepared.output)
        _, ws = prepared
        trailer = f"{TRAILER}: {ctx.call_id}"
        found = await workspace_git(
            ws, ["log", "-n", "50", "--format=%H", "--fixed-strings", f"--grep={trailer}"]
        )
        shas = [line for line in found.stdout.split() if is_sha(line)]
        if not found.ok or not shas:
            return Unknown(f"no commit carries {trailer!r}")
        _, branch = await head(ws)
        return Completed(
            output=f"committed {shas[0]} on {branch}", evidence=(commit_evidence(shas[0], branch),)
        )


class GitPush:
    name = "git_push"
    description = "Push the current HEAD to a branch of the origin remote (never forced)."
    parameters = schema(PushArgs)
    effect: Effect = "write"

    def __init__(
        self,
        *,
        allow_protected: bool = False,
        token: str | None = None,
        credentials: GitCredentials | None = None,
    ) -> None:
        self.allow_protected = allow_protected
        self._token = token
        self._credentials = credentials

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        prepared = prepare(PushArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        try:
            remote = Remote.of(ws)
        except Permanent as e:
            return refused(str(e))
        if (problem := await self._refusal(remote, parsed.branch)) is not None:
            return refused(problem)
        try:
            # What an approval preview showed is what goes: HEAD may have moved since.
            sha = remote.pinned(ctx) or await remote.head_of(ws)
        except Permanent as e:
            return refused(f"git push to {parsed.branch} failed: {e}")
        token = await self._token_for(remote, ctx)
        refspec = f"{sha}:refs/heads/{parsed.branch}"  # no leading '+': never a force push
        result = await git(
            ["--git-dir", str(remote.mirror), "push", "--quiet", remote.url, refspec],
            token=token,
            url=remote.url,
        )
        if not result.ok:
            return refused(_push_failure(parsed.branch, result.stderr.strip(), token))
        outcome = await self._read_back(remote, parsed.branch, sha, token)
        return outcome if isinstance(outcome, Completed) else refused(outcome.reason)

    async def poll(self, handle: str, ctx: ToolContext) -> Completed:
        return refused(f"{handle!r}: git_push has no pending work to poll")

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The branch, the commit and what it changes against the remote's default branch."""
        prepared = prepare(PushArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared.output
        parsed, ws = prepared
        try:
            remote = Remote.of(ws)
            sha = await remote.head_of(ws)
        except Permanent as e:
            return f"cannot preview the push: {e}"
        remote.pin(ctx, sha)
        base = f"origin/{remote.default_branch}"
        mirror = ["--git-dir", str(remote.mirror)]
        branch = f"refs/heads/{remote.default_branch}"
        log = await git([*mirror, "log", "--oneline", "-n", "10", f"{branch}..{sha}"])
        stat = await git([*mirror, "diff", "--stat", f"{branch}...{sha}"])
        lines = [f"push `{sha[:12]}` to branch `{parsed.branch}`"]
        if log.ok and log.stdout.strip():
            lines.append(f"commits:\n{log.stdout.strip()}")
        if stat.ok and stat.stdout.strip():
            lines.append(f"diff against {base}:\n{stat.stdout.rstrip()}")
        return "\n".join(lines)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """Pushed if the remote branch points at the local HEAD."""
        prepared = prepare(PushArgs, args, ctx)
        if isinstance(prepared, Completed):
            return Unknown(prepared.output)
        parsed, ws = prepared
        try:
            remote = Remote.of(ws)
        except Permanent as e:
            return Unknown(str(e))
        local_sha = remote.pinned(ctx) or (await head(ws))[0]
        token = await self._token_for(remote, ctx)
        return await self._read_back(remote, parsed.branch, local_sha, token)

    async def _refusal(self, remote: Remote, branch: str) -> str | None:
        if not valid_branch(branch):
            return f"{branch!r} is not a valid branch name"
        if self.allow_protected:
            return None
        protected = ALWAYS_PROTECTED | {remote.default_branch}
        if branch in protected:
            return f"refusing to push to protected branch {branch!r}; push a feature branch"
        return None

    async def _read_back(
        self, remote: Remote, branch: str, local_sha: str, token: str | None
    ) -> Completed | Unknown:
        found = await git(
            ["ls-remote", remote.url, f"refs/heads/{branch}"], token=token, url=remote.url
        )
        remote_sha = found.stdout.split()[0] if found.ok and found.stdout.strip() else None
        if not local_sha or remote_sha != local_sha:
            return Unknown(f"origin/{branch} is at {remote_sha}, not the local HEAD {local_sha}")
        evidence = EvidenceItem(
            kind="commit",
            ref=local_sha,
            strength=Strength.provider_read_back,
            detail={"sha": local_sha, "branch": branch, "pushed": True},
        )
        return Completed(
            output=f"pushed {local_sha} to origin/{branch} (read back with ls-remote)",
            evidence=(evidence,),
        )

    async def _token_for(self, remote: Remote, ctx: ToolContext) -> str | None:
        if not uses_https(remote.url):
            return None
        if self._credentials is not None:
            return await self._credentials.git_token(ctx.task_id, remote.url)
        return self._token


def _push_failure(branch: str, stderr: str, token: str | None) -> str:
    if any(sign in stderr.lower() for sign in _AUTH_FAILURES):
        why = (
            "the remote refused Keel's token"
            if token
            else "the remote requires credentials and Keel has no token for it (configure a "
            "GitHub App or a repository token)"
        )
        return f"git push to {branch} failed: {why}.\n{stderr}"
    return f"git push to {branch} was rejected:\n{stderr}"


@dataclass(frozen=True, slots=True)
class Remote:
    """Where a workspace's pushes go, from Keel's record of its clone (never from the
    workspace's own configuration): the URL, the remote's default branch, Keel's mirror."""

    url: str
    default_branch: str
    mirror: Path
    known: tuple[str, ...]  # commits the mirror holds: the clone's, the last one sent

    @staticmethod
    def of(ws: Path) -> Remote:
        state = WorkspaceState(ws)
        record = state.read_record() or {}
        url = record.get("push_url")
        if not isinstance(url, str) or not url:
            raise Permanent(
                "Keel has no record of where this workspace was cloned from; refusing to push"
            )
        default = record.get("default_branch")
        branch = default if isinstance(default, str) and default else "main"
        cloned = record.get("cloned_sha")
        known = [cloned] if isinstance(cloned, str) and is_sha(cloned) else []
        try:
            last = read_no_follow(state.root / IMPORTED).strip()
            known += [last] if is_sha(last) else []
        except OSError:
            pass
        return Remote(url, branch, state.mirror, tuple(known))

    def remember(self, sha: str) -> None:
        """The mirror holds ``sha`` now: later packs need not carry its objects again."""
        _write_private(self.mirror.parent / IMPORTED, sha)

    def pin(self, ctx: ToolContext, sha: str) -> None:
        """Record the commit an approval preview showed for this call: the push sends it."""
        folder = self.mirror.parent / PINNED
        folder.mkdir(mode=0o700, exist_ok=True)
        _write_private(folder / _call_key(ctx), sha)

    def pinned(self, ctx: ToolContext) -> str | None:
        try:
            sha = read_no_follow(self.mirror.parent / PINNED / _call_key(ctx)).strip()
        except OSError:
            return None
        return sha if is_sha(sha) else None

    async def head_of(self, ws: Path) -> str:
        """The workspace's HEAD commit, in the mirror: what .git/HEAD names when the mirror
        has it already (the commit git_commit sent), else sent now from the sandbox."""
        named = head_named_by_files(ws)
        if named is not None and (named in self.known or await in_mirror(self.mirror, named)):
            return named
        sha = await import_head(ws, self.mirror, self.known)
        self.remember(sha)
        return sha


# A branch name git accepts (``git check-ref-format --branch``), checked here rather than by
# a process per push, and stricter: a plain set of characters, no component starting with a
# dot or ending in ".lock", no "..", "//" or "@{", no leading "-" or trailing "." or "/".
_BRANCH = re.compile(r"[A-Za-z0-9][A-Za-z0-9._/+,=@-]{0,199}")
_BRANCH_FORBIDDEN = re.compile(r"\.\.|//|@\{|/\.|\.lock(?:/|$)|[./]$")


def valid_branch(name: str) -> bool:
    return bool(_BRANCH.fullmatch(name)) and not _BRANCH_FORBIDDEN.search(name) and name != "HEAD"
