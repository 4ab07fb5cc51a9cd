"""Workspaces: one git checkout per root task, reused across ticks and processes.

A workspace is ``<root>/<root_task_id>``: a clone of the task's repository at the requested
ref. What Keel needs to know about it lives in its state folder beside it
(``<root>/.keel-state/<root_task_id>``, see ``runtime.workspace.state``), never inside it:
``workspace.json`` records the URL it was cloned from (where pushes go), the ref, the remote's
default branch as the remote reported it, and the sandbox mode; ``mirror.git`` is a bare clone
that Keel's own git pushes from. A workspace whose checkout or record is missing, corrupt or
for another source is rebuilt, never used as if it were right. Clones land in a staging folder
and are renamed into place, so a crash mid-clone leaves nothing that looks valid.
"""

from __future__ import annotations

import asyncio
import logging
import re
import shutil
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.errors import ConfigError, NotFound, Retryable
from runtime.workspace.git import check_repo_url, git, uses_https, workspace_git
from runtime.workspace.mirror import retire_senders
from runtime.workspace.sandbox import Sandbox, SandboxMode
from runtime.workspace.setup import mark_fresh
from runtime.workspace.snapshots import SnapshotStore
from runtime.workspace.state import STATE_FOLDER, WorkspaceState, is_real_dir

log = logging.getLogger(__name__)

# Where Keel kept its record inside the workspace before its state moved out of it.
LEGACY_RECORD = Path(".keel") / "workspace.json"

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


@dataclass(frozen=True, slots=True)
class WorkspaceSpec:
    root_task_id: str
    repo_url: str
    ref: str | None = None  # branch, tag or sha; None means the remote's default branch


class Workspaces:
    """Creates and finds workspaces under ``root``; ``sandbox`` is how commands run in them."""

    def __init__(
        self,
        root: Path = Path(".keel/workspaces"),
        sandbox: SandboxMode = "auto",
        *,
        readonly_paths: Sequence[Path] = (),
        hidden: Sequence[Path] = (),
        snapshots: Path | None = None,
        latest_snapshot: Callable[[str], Awaitable[str | None]] | None = None,
    ):
        self.root = root
        # Where workspaces are saved for another machine (``runtime.workspace.snapshots``);
        # a workspace made afresh starts from its tree's latest snapshot there, as
        # ``latest_snapshot`` names it (the database's record).
        self.snapshots = SnapshotStore(snapshots) if snapshots is not None else None
        self.latest_snapshot = latest_snapshot
        # Other workspaces are never visible to a command, whatever else its sandbox shows.
        self.sandbox = Sandbox(
            mode=sandbox,
            readonly_paths=tuple(readonly_paths),
            hidden=(*hidden, root.absolute()),
        )
        self._locks: dict[str, asyncio.Lock] = {}

    def path_for(self, root_task_id: str) -> Path:
        if not _SAFE_ID.fullmatch(root_task_id):
            raise ConfigError(f"root_task_id {root_task_id!r} is not a safe folder name")
        return (self.root / root_task_id).absolute()

    async def ensure(self, spec: WorkspaceSpec, token: str | None = None) -> Path:
        """The workspace for ``spec``, cloned if missing or invalid. ``token`` is for HTTPS."""
        check_repo_url(spec.repo_url)
        path = self.path_for(spec.root_task_id)
        async with self._locks.setdefault(spec.root_task_id, asyncio.Lock()):
            state = WorkspaceState(path)
            record = state.read_record()
            current = self._isolation_record()
            if record is not None and any(record.get(k) != v for k, v in current.items()):
                # Keel's git in a workspace isolates as configured now, not as when it was
                # cloned: a workspace made under ``none`` gets no unsandboxed git after a
                # restart with bubblewrap.
                state.write_record(record | current)
            if await is_valid(path, spec):
                return path
            if record is None and (path / LEGACY_RECORD).is_file():
                kept = self.root / STATE_FOLDER / f"legacy-{path.name}-{uuid.uuid4().hex[:8]}"
                log.warning(
                    "workspace %s predates Keel's state folder; its files are kept at %s "
                    "and it is cloned again",
                    path,
                    kept,
                )
                kept.parent.mkdir(parents=True, exist_ok=True)
                path.rename(kept)
            retire_senders(path)
            for stale in (path, state.root):
                if stale.exists() or stale.is_symlink():
                    log.warning("workspace %s is invalid for %s; recreating", path, spec.repo_url)
                    await asyncio.to_thread(_remove, stale)
            await self._create(path, spec, token)
            return path

    async def discard(self, root_task_id: str) -> None:
        """Remove the tree's workspace from this machine (another machine held it since, so
        this copy is stale); the next ``ensure`` makes it afresh, from the latest snapshot."""
        path = self.path_for(root_task_id)
        async with self._locks.setdefault(root_task_id, asyncio.Lock()):
            retire_senders(path)
            for stale in (path, WorkspaceState(path).root):
                if stale.exists() or stale.is_symlink():
                    await asyncio.to_thread(_remove, stale)

    def _isolation_record(self) -> dict[str, object]:
        return {"sandbox": self.sandbox.mode, "hidden": [str(h) for h in self.sandbox.hidden]}

    async def _create(self, path: Path, spec: WorkspaceSpec, token: str | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".staging-{spec.root_task_id}-{uuid.uuid4().hex[:8]}"
        try:
            await clone(spec, staging, token, self.sandbox.mode)
            latest = self.latest_snapshot
            sha = await latest(spec.root_task_id) if latest is not None else None
            if self.snapshots is not None and sha is not None:
                restored = await self.snapshots.restore(staging, spec.root_task_id, sha)
                log.info("workspace %s restored from snapshot %s", path.name, restored.sha[:12])
            staged = WorkspaceState(staging)
            staged.write_record((staged.read_record() or {}) | self._isolation_record())
            mark_fresh(staged)
            try:
                staging.rename(path)
                WorkspaceState(staging).root.rename(WorkspaceState(path).root)
            except OSError:
                if not await is_valid(path, spec):  # another process won the race
                    raise
        finally:
            for leftover in (staging, WorkspaceState(staging).root):
                if leftover.exists():
                    await asyncio.to_thread(shutil.rmtree, leftover, True)


def clone_source(repo_url: str) -> str:
    if "://" in repo_url or re.match(r"^[\w.-]+@[\w.-]+:", repo_url):
        return repo_url
    local = Path(repo_url).expanduser().absolute()
    if not local.exists():
        raise NotFound(f"repository path {local} does not exist")
    return str(local)


async def clone(
    spec: WorkspaceSpec, dest: Path, token: str | None, sandbox: SandboxMode = "auto"
) -> None:
    """Clone the remote into Keel's mirror (the only git that talks to it with the token),
    then check the workspace out of the mirror. Both are new folders nothing else has
    touched, so Keel's trusted git may work in them; from here on only sandboxed git does."""
    source = clone_source(spec.repo_url)
    auth = token if uses_https(source) else None
    if token and auth is None:
        log.warning("not sending the token for %s: it is not an HTTPS URL", spec.repo_url)
    state = WorkspaceState(dest).ensure()
    mirror = str(state.mirror)
    result = await git(
        ["clone", "--bare", "--quiet", "--", source, mirror],
        token=auth,
        url=source if auth else None,
        timeout_s=900,
    )
    if not result.ok:
        raise Retryable(f"git clone of {spec.repo_url} failed: {result.stderr.strip()[-500:]}")
    default = await git(["--git-dir", mirror, "symbolic-ref", "--short", "-q", "HEAD"])
    local = await git(["clone", "-q", "--no-hardlinks", "--", mirror, str(dest)], timeout_s=900)
    if not local.ok:
        raise Retryable(f"checking out {spec.repo_url} failed: {local.stderr.strip()[-500:]}")
    await git(["-C", str(dest), "remote", "set-url", "origin", source])
    if spec.ref:
        if spec.ref.startswith("-") or "\x00" in spec.ref:  # a pull request's branch name
            raise NotFound(f"ref {spec.ref!r} is not a ref git can check out")
        checkout = await git(["-C", str(dest), "checkout", "--quiet", spec.ref, "--"])
        if not checkout.ok:
            raise NotFound(f"ref {spec.ref!r} not found in {spec.repo_url}: {checkout.stderr}")
    head = await git(["-C", str(dest), "rev-parse", "HEAD"])
    record = asdict(spec) | {
        "push_url": source,
        "default_branch": default.stdout.strip() or None,
        "cloned_sha": head.stdout.strip(),
        "sandbox": sandbox,
        "created_at": time.time(),
    }
    state.write_record(record)


def read_metadata(path: Path) -> dict[str, object] | None:
    """Keel's record of the workspace at ``path`` (None when missing or corrupt)."""
    return WorkspaceState(path).read_record()


async def is_valid(path: Path, spec: WorkspaceSpec) -> bool:
    """A checkout with a HEAD, recorded as a clone of the same source at the same ref."""
    state = WorkspaceState(path)
    record = state.read_record()
    if record is None or not is_real_dir(path / ".git") or not is_real_dir(state.mirror):
        return False
    if (record.get("repo_url"), record.get("ref")) != (spec.repo_url, spec.ref):
        return False
    if record.get("push_url") != clone_source(spec.repo_url):
        return False
    head = await workspace_git(path, ["rev-parse", "--verify", "--quiet", "HEAD"])
    return head.ok


def _remove(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    else:
        shutil.rmtree(path)
