"""Devbox git tools: git_commit and git_push, both writes that can be reconciled.

A commit carries a ``Keel-Call: <call id>`` trailer, so recovery finds it in the history
instead of committing twice. A push never forces, refuses protected branches (the remote's
default, main, master) unless allowed, and is read back with ``ls-remote``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import Field

from runtime.evidence import EvidenceItem, Strength
from runtime.tools.base import Completed, Effect, Started, ToolContext, Unknown
from runtime.tools.devbox.calls import ToolArgs, prepare, refused, schema
from runtime.workspace.git import IDENTITY, git, uses_https

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


async def head(ws: Path) -> tuple[str, str]:
    """(sha, branch) of HEAD; the branch is ``HEAD`` when detached."""
    sha = await git(["rev-parse", "HEAD"], cwd=ws)
    branch = await git(["symbolic-ref", "--short", "-q", "HEAD"], cwd=ws)
    return sha.stdout.strip(), branch.stdout.strip() or "HEAD"


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
        await git(["add", "--all"], cwd=ws)
        if (await git(["diff", "--cached", "--quiet"], cwd=ws)).ok:
            return refused("nothing to commit: the workspace has no changes")
        message = f"{parsed.message.rstrip()}\n\n{TRAILER}: {ctx.call_id}\n"
        result = await git(
            [*IDENTITY, "commit", "--quiet", "--no-verify", "-F", "-"],
            cwd=ws,
            stdin=message.encode(),
        )
        if not result.ok:
            return refused(f"git commit failed:\n{result.stderr.strip()}")
        sha, branch = await head(ws)
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
        found = await git(
            ["log", "-n", "50", "--format=%H", "--fixed-strings", f"--grep={trailer}"], cwd=ws
        )
        shas = found.stdout.split()
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
        if (problem := await self._refusal(ws, parsed.branch)) is not None:
            return refused(problem)
        token = await self._token_for(ws, ctx)
        refspec = f"HEAD:refs/heads/{parsed.branch}"  # no leading '+': never a force push
        result = await git(["push", "--quiet", "origin", refspec], cwd=ws, token=token)
        if not result.ok:
            return refused(_push_failure(parsed.branch, result.stderr.strip(), token))
        outcome = await self._read_back(ws, parsed.branch, ctx)
        return outcome if isinstance(outcome, Completed) else refused(outcome.reason)

    async def poll(self, handle: str, ctx: ToolContext) -> Completed:
        return refused(f"{handle!r}: git_push has no pending work to poll")

    async def preview(self, args: dict[str, Any], ctx: ToolContext) -> str:
        """The branch, the commit and what it changes against the remote's default branch."""
        prepared = prepare(PushArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared.output
        parsed, ws = prepared
        sha, _ = await head(ws)
        base = f"origin/{await remote_default_branch(ws)}"
        log = await git(["log", "--oneline", "-n", "10", f"{base}..HEAD"], cwd=ws)
        stat = await git(["diff", "--stat", f"{base}...HEAD"], cwd=ws)
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
        return await self._read_back(ws, parsed.branch, ctx)

    async def _refusal(self, ws: Path, branch: str) -> str | None:
        valid = await git(["check-ref-format", "--branch", branch], cwd=ws)
        if not valid.ok or branch.startswith("-"):
            return f"{branch!r} is not a valid branch name"
        if self.allow_protected:
            return None
        protected = ALWAYS_PROTECTED | {await remote_default_branch(ws)}
        if branch in protected:
            return f"refusing to push to protected branch {branch!r}; push a feature branch"
        return None

    async def _read_back(self, ws: Path, branch: str, ctx: ToolContext) -> Completed | Unknown:
        token = await self._token_for(ws, ctx)
        remote = await git(["ls-remote", "origin", f"refs/heads/{branch}"], cwd=ws, token=token)
        remote_sha = remote.stdout.split()[0] if remote.ok and remote.stdout.strip() else None
        local_sha, _ = await head(ws)
        if remote_sha != local_sha:
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

    async def _token_for(self, ws: Path, ctx: ToolContext) -> str | None:
        origin = (await git(["config", "--get", "remote.origin.url"], cwd=ws)).stdout.strip()
        if not uses_https(origin):
            return None
        if self._credentials is not None:
            return await self._credentials.git_token(ctx.task_id, origin)
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


async def remote_default_branch(ws: Path) -> str:
    """The remote's default branch as recorded by the clone (``origin/HEAD``)."""
    ref = await git(["symbolic-ref", "--short", "-q", "refs/remotes/origin/HEAD"], cwd=ws)
    name = ref.stdout.strip()
    return name.removeprefix("origin/") if name else "main"
