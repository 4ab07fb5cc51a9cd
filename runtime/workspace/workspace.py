"""Workspaces: one git checkout per root task, reused across ticks and processes.

A workspace is ``<root>/<root_task_id>``: a clone of the task's repository at the requested
ref plus ``.keel/workspace.json`` recording what it was cloned from (``.keel/`` is listed in
``.git/info/exclude`` so it is never committed). A workspace whose checkout or record is
missing, corrupt or for another source is rebuilt, never used as if it were right. Clones
land in a staging folder and are renamed into place, so a crash mid-clone leaves nothing
that looks valid.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import shutil
import time
import uuid
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from runtime.errors import ConfigError, NotFound, Retryable
from runtime.workspace.git import check_repo_url, git, uses_https
from runtime.workspace.sandbox import Sandbox, SandboxMode

log = logging.getLogger(__name__)

METADATA = Path(".keel") / "workspace.json"
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
    ):
        self.root = root
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
            if await is_valid(path, spec):
                return path
            if path.exists():
                log.warning("workspace %s is invalid for %s; recreating it", path, spec.repo_url)
                await asyncio.to_thread(shutil.rmtree, path)
            await self._create(path, spec, token)
            return path

    async def _create(self, path: Path, spec: WorkspaceSpec, token: str | None) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        staging = self.root / f".staging-{spec.root_task_id}-{uuid.uuid4().hex[:8]}"
        try:
            await clone(spec, staging, token)
            try:
                staging.rename(path)
            except OSError:
                if not await is_valid(path, spec):  # another process won the race
                    raise
        finally:
            if staging.exists():
                await asyncio.to_thread(shutil.rmtree, staging, True)


def clone_source(repo_url: str) -> str:
    if "://" in repo_url or re.match(r"^[\w.-]+@[\w.-]+:", repo_url):
        return repo_url
    local = Path(repo_url).expanduser().absolute()
    if not local.exists():
        raise NotFound(f"repository path {local} does not exist")
    return str(local)


async def clone(spec: WorkspaceSpec, dest: Path, token: str | None) -> None:
    source = clone_source(spec.repo_url)
    auth = token if uses_https(source) else None
    if token and auth is None:
        log.warning("not sending the token for %s: it is not an HTTPS URL", spec.repo_url)
    result = await git(["clone", "--quiet", "--", source, str(dest)], token=auth, timeout_s=900)
    if not result.ok:
        raise Retryable(f"git clone of {spec.repo_url} failed: {result.stderr.strip()[-500:]}")
    if spec.ref:
        checkout = await git(["checkout", "--quiet", spec.ref, "--"], cwd=dest)
        if not checkout.ok:
            raise NotFound(f"ref {spec.ref!r} not found in {spec.repo_url}: {checkout.stderr}")
    head = await git(["rev-parse", "HEAD"], cwd=dest)
    write_metadata(dest, spec, head.stdout.strip())


def write_metadata(path: Path, spec: WorkspaceSpec, cloned_sha: str) -> None:
    meta = path / METADATA
    meta.parent.mkdir(parents=True, exist_ok=True)
    record = asdict(spec) | {"cloned_sha": cloned_sha, "created_at": time.time()}
    tmp = meta.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2))
    os.replace(tmp, meta)
    exclude = path / ".git" / "info" / "exclude"
    exclude.parent.mkdir(parents=True, exist_ok=True)
    with exclude.open("a") as f:
        f.write("\n.keel/\n")


def read_metadata(path: Path) -> dict[str, object] | None:
    try:
        record = json.loads((path / METADATA).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


async def is_valid(path: Path, spec: WorkspaceSpec) -> bool:
    """A checkout with a HEAD, recorded as a clone of the same source at the same ref."""
    record = read_metadata(path)
    if record is None or not (path / ".git").is_dir():
        return False
    if (record.get("repo_url"), record.get("ref")) != (spec.repo_url, spec.ref):
        return False
    head = await git(["rev-parse", "--verify", "--quiet", "HEAD"], cwd=path)
    origin = await git(["config", "--get", "remote.origin.url"], cwd=path)
    return head.ok and origin.stdout.strip() == clone_source(spec.repo_url)
