"""Snapshots: a workspace saved where another machine can restore it.

A snapshot is one commit: its tree is the whole worktree (tracked and untracked files, not
the ignored ones), its parent the workspace's HEAD at that moment, so the branch and every
commit not yet pushed come with it. The workspace's own git makes it inside the sandbox,
through a temporary index (the workspace's index, HEAD and branches are left as they were),
and hands it to Keel's mirror the way commits always travel (``runtime.workspace.mirror``:
the mirror's ``index-pack`` checks every object). Keel's git then pushes it from the mirror
to the snapshot store, a bare repository Keel owns, under ``refs/keel/snapshots/<root task>/``
with one ref per machine: a machine that lost a tree (its lease passed while a phase of it
still ran) can only replace its own ref, never the snapshots of the machine that took the tree
over. Which snapshot is the tree's latest is the database's record (``runtime.store.owners``),
written by the owner alone; a restore asks for that commit.

Cost: one sandboxed ``git add --all`` into a copy of the index (git re-reads only files whose
size or time changed) and a pack of the objects that are new since the previous snapshot;
the push sends only what the store lacks. When the tree and HEAD are those of the previous
snapshot nothing is made or sent. The store keeps every snapshot's objects (their refs are
replaced); ``git gc`` on it reclaims what no ref reaches.

Only HEAD's history and the worktree are saved: other local branches, the stash and the
workspace's git configuration are not. Restoring (``restore``) happens only in a fresh clone
that nothing sandboxed has touched yet, so Keel's own git may work in it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import Permanent, Retryable
from runtime.workspace.git import git, is_sha
from runtime.workspace.mirror import in_mirror, send_to_mirror
from runtime.workspace.state import WorkspaceState

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_MESSAGE = "keel: snapshot of the workspace"
_TRAILER = "Keel-Branch"

# Makes the snapshot commit and sends it (see ``mirror.SEND_HEAD`` for the protocol): on
# stderr "keel-head <sha> <branch>", or "keel-same" when the tree and HEAD are the previous
# snapshot's ($prev_tree and $prev_head, set before it); the arguments are commits the
# mirror has, whose objects need not travel. The branch goes in a trailer of the message.
_SNAPSHOT = (
    "idx=$(mktemp) || exit 3; "
    '{ cp .git/index "$idx" 2>/dev/null || rm -f "$idx"; }; export GIT_INDEX_FILE="$idx"; '
    "git add --all >&2 && tree=$(git write-tree) && "
    'head=$(git rev-parse -q --verify "HEAD^{commit}") || exit 3; '
    'rm -f "$idx"; branch=$(git symbolic-ref --short -q HEAD) || branch=HEAD; '
    'if [ "$tree" = "$prev_tree" ] && [ "$head" = "$prev_head" ]; then '
    "echo keel-same >&2; exit 0; fi; "
    f'sha=$(git commit-tree "$tree" -p "$head" -m "{_MESSAGE}" -m "{_TRAILER}: $branch") '
    "|| exit 3; "
    'echo "keel-head $sha $branch" >&2; '
    '{ echo "$sha"; for b in "$@"; do echo "$b"; done | '
    'git cat-file --batch-check="%(objectname) %(objecttype)" | '
    'while read -r b t; do [ "$t" = commit ] && echo "^$b"; done; } '
    "| git pack-objects --revs --stdout -q"
)


@dataclass(frozen=True, slots=True)
class Taken:
    """A snapshot made and stored: its commit, the tree it saves, HEAD then, its branch."""

    sha: str
    tree: str
    head: str
    branch: str


@dataclass(frozen=True, slots=True)
class Unchanged:
    """The workspace is as the previous snapshot saved it: nothing was made."""


@dataclass(frozen=True, slots=True)
class Withheld:
    """The workspace holds a secret's value in a file the snapshot would save: nothing is
    stored (a secret never leaves for shared storage); the previous snapshot stands."""

    paths: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Restored:
    sha: str
    branch: str


def snapshot_refs(root_id: str) -> str:
    """The folder of refs that hold the tree's snapshots, one per machine."""
    if not _SAFE_ID.fullmatch(root_id):
        raise ValueError(f"{root_id!r} is not a task id")
    return f"refs/keel/snapshots/{root_id}"


def snapshot_ref(root_id: str, machine: str) -> str:
    digest = hashlib.sha256(machine.encode()).hexdigest()[:16]
    return f"{snapshot_refs(root_id)}/{digest}"


class SnapshotStore:
    """The bare repository at ``path`` (made on first use), shared by every machine."""

    def __init__(self, path: Path) -> None:
        self.path = path.absolute()

    async def _ensure(self) -> None:
        if (self.path / "HEAD").is_file():
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        made = await git(["init", "--bare", "--quiet", str(self.path)])
        if not made.ok:
            raise Retryable(f"could not make the snapshot store {self.path}: {made.stderr}")

    async def take(
        self,
        ws: Path,
        root_id: str,
        machine: str,
        previous: tuple[str, str] | None = None,
        secrets: Sequence[str] = (),
    ) -> Taken | Unchanged | Withheld:
        """Snapshot the workspace ``ws`` of tree ``root_id`` on ``machine``; ``previous`` is
        the last snapshot's (sha, tree): when the workspace still matches it nothing is
        made. A snapshot whose new files hold one of ``secrets`` is withheld."""
        await self._ensure()
        state = WorkspaceState(ws)
        record = state.read_record() or {}
        prev_sha, prev_tree = previous if previous else ("", "")
        prev_head = await self._parent(state.mirror, prev_sha) if prev_sha else ""
        known = [s for s in (prev_sha, str(record.get("cloned_sha", ""))) if is_sha(s)]
        given = {"prev_tree": prev_tree, "prev_head": prev_head}
        script = "".join(f"{k}={v if is_sha(v) else ''}; " for k, v in given.items()) + _SNAPSHOT
        sent = await send_to_mirror(ws, state.mirror, script, known=known)
        if "keel-same" in sent.result.stderr.splitlines() and sent.result.ok:
            return Unchanged()
        if not sent.result.ok or not sent.imported:
            problem = (sent.refusal or sent.result.stderr).strip()[-500:]
            raise Retryable(f"could not snapshot the workspace: {problem}")
        # What the sandbox said is a claim; the mirror's copy is what counts.
        tree = await git(["--git-dir", str(state.mirror), "rev-parse", f"{sent.sha}^{{tree}}"])
        head = await self._parent(state.mirror, sent.sha)
        if not tree.ok or not is_sha(tree.stdout.strip()) or not head:
            raise Retryable(f"the snapshot {sent.sha} is not whole in the mirror")
        holding = await _holding(state.mirror, prev_sha or head, sent.sha, secrets)
        if holding:
            return Withheld(holding)
        pushed = await git(
            [
                "--git-dir",
                str(state.mirror),
                "push",
                "--quiet",
                "--force",
                "--no-verify",
                str(self.path),
                f"{sent.sha}:{snapshot_ref(root_id, machine)}",
            ],
            timeout_s=900,
        )
        if not pushed.ok:
            raise Retryable(f"could not store the snapshot: {pushed.stderr.strip()[-500:]}")
        return Taken(sent.sha, tree.stdout.strip(), head, sent.branch)

    async def restore(self, fresh: Path, root_id: str, sha: str) -> Restored:
        """Put snapshot ``sha`` of ``root_id`` into ``fresh``, a clone Keel has just made
        (nothing sandboxed has run in it): HEAD on the snapshot's branch at the snapshot's
        parent, the worktree as the snapshot saved it, changes uncommitted as they were."""
        mirror = WorkspaceState(fresh).mirror
        refs = snapshot_refs(root_id)
        fetched = await git(
            ["--git-dir", str(mirror), "fetch", "--quiet", "--no-tags", str(self.path),
             f"+{refs}/*:refs/keel/snapshots/*"],
            timeout_s=900,
        )  # fmt: skip
        if not fetched.ok or not await in_mirror(mirror, sha):
            raise Permanent(
                f"the snapshot {sha} of {root_id} is not in the snapshot store {self.path}: "
                f"{fetched.stderr.strip()[-300:]}"
            )
        head = await self._parent(mirror, sha)
        branch = await _branch_of(mirror, sha)
        ws = str(fresh)
        steps = [
            ["-C", ws, "fetch", "--quiet", "--no-tags", str(mirror), sha],
            ["-C", ws, "checkout", "--quiet", "-B", branch, head, "--"]
            if branch != "HEAD"
            else ["-C", ws, "checkout", "--quiet", "--detach", head, "--"],
            ["-C", ws, "read-tree", "-u", "--reset", sha],
            ["-C", ws, "reset", "--quiet"],
        ]
        for step in steps:
            done = await git(step, timeout_s=900)
            if not done.ok:
                raise Retryable(f"could not restore the snapshot {sha}: {done.stderr.strip()}")
        return Restored(sha, branch)

    @staticmethod
    async def _parent(mirror: Path, sha: str) -> str:
        found = await git(["--git-dir", str(mirror), "rev-parse", "-q", "--verify", f"{sha}^1"])
        parent = found.stdout.strip()
        return parent if found.ok and is_sha(parent) else ""


async def _holding(mirror: Path, base: str, sha: str, secrets: Sequence[str]) -> tuple[str, ...]:
    """The files changed since ``base`` in snapshot ``sha`` that hold one of ``secrets``,
    searched by Keel's git in the mirror (the objects passed ``index-pack``). The values go
    to git on its stdin, never in its arguments (any user of the host reads those)."""
    values = [v for v in secrets if v]
    if not values:
        return ()
    changed = await git(
        ["--git-dir", str(mirror), "diff-tree", "-r", "-z", "--no-commit-id", "--name-only",
         "--no-renames", "--diff-filter=AMT", base, sha]
    )  # fmt: skip
    if not changed.ok:
        raise Retryable(f"could not list the snapshot's changes: {changed.stderr.strip()}")
    paths = [p for p in changed.stdout.split("\0") if p]
    if not paths:
        return ()
    scope = paths if len(paths) <= _GREP_PATHS else []  # beyond: the whole tree
    found = await git(
        ["--git-dir", str(mirror), "--literal-pathspecs", "grep", "-F", "-l", "-a", "-z",
         "-f", "/dev/stdin", sha, "--", *scope],
        stdin="\n".join(values).encode(),
    )  # fmt: skip
    if found.returncode == 1:  # no match
        return ()
    if not found.ok:
        raise Retryable(f"could not search the snapshot for secrets: {found.stderr.strip()}")
    prefix = f"{sha}:"
    return tuple(p.removeprefix(prefix) for p in found.stdout.split("\0") if p)


# More changed files than this are searched as the whole tree (the arguments stay short).
_GREP_PATHS = 500


async def _branch_of(mirror: Path, sha: str) -> str:
    """The branch the workspace was on when ``sha`` was made, as its trailer says. That is
    the sandbox's word, so it is used only if git takes it as a branch name; otherwise the
    restored HEAD is detached ("HEAD")."""
    said = await git(
        [
            "--git-dir",
            str(mirror),
            "log",
            "-1",
            f"--format=%(trailers:key={_TRAILER},valueonly,separator=%x00)",
            sha,
        ]
    )
    name = said.stdout.strip().split("\0")[0].strip() if said.ok else ""
    if not name or name == "HEAD" or name.startswith("-") or len(name) > 200:
        return "HEAD"
    checked = await git(["check-ref-format", "--branch", name])
    return name if checked.ok and checked.stdout.strip() == name else "HEAD"
