"""Cached environments: what a repository's setup produced, restored into the next workspace.

An entry holds the workspace's ignored paths after setup (``.venv``, ``node_modules``, a
build folder) and the sandbox's home (toolchains, package caches). Its key is a digest of the
repository, the setup definition and the blob ids of the repository's lockfiles and manifests
at the cloned commit, read from Keel's mirror, not from the workspace: so an entry is never
shared between repositories, and a changed lockfile means a new entry.

Layout: ``<root>/<key>/entry.json`` (repository, paths, size, times) beside ``workspace/`` and
``home/``. Entries are written in a staging folder and renamed into place, so a crash never
leaves a half entry that looks whole. Nothing that holds a repository secret is stored: the
captured files are searched for each secret's value first.

Restore of the workspace's paths is by hard links when Keel runs as root and the cache and the
workspaces share a filesystem (``cp -al``: one process, no per-file Python), else a copy. Linked
files share their inode with the entry, so when stored they are given to ``CACHE_OWNER`` and
made read-only: a sandboxed command runs as Keel's user with no capability, so it can read them
but neither write nor chmod them, and no task changes what the next one restores (an entry
whose files are not so any more is discarded, not restored). The home is always copied: tools
write their caches there in place. Each path is restored under a staging folder and renamed
into place, so an interrupted restore leaves no half tree that looks whole. Every path is
checked before Keel copies from or into a workspace: relative, no ``..``, no ``.git``, and
every folder on the way a real folder, never a link.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import stat
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from runtime.workspace.commands import mask
from runtime.workspace.process import run_process
from runtime.workspace.sandbox import host_program
from runtime.workspace.state import UnsafeState, ensure_real_dir

log = logging.getLogger(__name__)

FORMAT = 1
CACHE_OWNER = 65534  # "nobody": the owner of an entry's linked files, never a sandbox's user
RestoreMode = Literal["link", "copy"]
# Files whose content decides what setup installs. Only the repository's top level: a
# monorepo's nested lockfiles are named by an operator's setup command, which is in the key.
LOCKFILES = (
    "package.json", "package-lock.json", "npm-shrinkwrap.json", "yarn.lock", "pnpm-lock.yaml",
    "bun.lockb", "pyproject.toml", "setup.py", "setup.cfg", "poetry.lock", "uv.lock",
    "Pipfile.lock", "requirements.txt", "requirements-dev.txt", "Cargo.toml", "Cargo.lock",
    "go.mod", "go.sum", "Gemfile", "Gemfile.lock", "pom.xml", "build.gradle",
    ".keel/setup.sh", ".python-version", ".nvmrc", ".tool-versions", "rust-toolchain.toml",
)
_SCAN_CHUNK = 1 << 20


def cache_key(repo: str, setup: str, maintenance: str | None, blobs: Mapping[str, str]) -> str:
    """The entry's name: the repository, how it is set up, and what its lockfiles say."""
    material = json.dumps(
        {
            "format": FORMAT,
            "repo": repo,
            "setup": setup,
            "maintenance": maintenance or "",
            "blobs": dict(sorted(blobs.items())),
            "machine": os.uname().machine,
        },
        sort_keys=True,
    )
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@dataclass(frozen=True, slots=True)
class Entry:
    key: str
    repo: str
    paths: tuple[str, ...]
    bytes: int
    created_at: float
    last_used: float


@dataclass(frozen=True, slots=True)
class Restored:
    entry: Entry
    method: Literal["hard links", "copy"]


class EnvCache:
    def __init__(
        self,
        root: Path,
        *,
        max_bytes: int = 20 * 2**30,
        max_age_s: float = 14 * 86_400,
        restore: RestoreMode = "link",
    ) -> None:
        self.root = root.absolute()
        self.max_bytes = max_bytes
        self.max_age_s = max_age_s
        self.restore_mode = restore

    def _folder(self, key: str) -> Path:
        if not key.isalnum():
            raise ValueError(f"cache key {key!r} is not a digest")
        return self.root / key

    def find(self, key: str) -> Entry | None:
        return _read_entry(self._folder(key))

    def entries(self) -> list[Entry]:
        if not self.root.is_dir():
            return []
        folders = [f for f in self.root.iterdir() if not f.name.startswith(".")]
        found = [_read_entry(folder) for folder in folders]
        return sorted((e for e in found if e is not None), key=lambda e: e.last_used)

    def clear(self, repo: str | None = None) -> list[Entry]:
        """Remove every entry (of ``repo`` only, when given); the removed ones."""
        gone = [e for e in self.entries() if repo is None or e.repo == repo]
        for entry in gone:
            self._remove(entry.key)
        return gone

    def evict(self, now: float | None = None) -> list[Entry]:
        """Entries unused for ``max_age_s``, then the least recently used beyond
        ``max_bytes``."""
        now = time.time() if now is None else now
        kept: list[Entry] = []
        gone: list[Entry] = []
        for entry in self.entries():
            (gone if now - entry.last_used > self.max_age_s else kept).append(entry)
        total = sum(e.bytes for e in kept)
        while kept and total > self.max_bytes:
            oldest = kept.pop(0)
            total -= oldest.bytes
            gone.append(oldest)
        for entry in gone:
            self._remove(entry.key)
        return gone

    @property
    def links(self) -> bool:
        """Whether restores link: asked for, and Keel can give the files another owner."""
        return self.restore_mode == "link" and os.geteuid() == 0

    async def store(
        self,
        key: str,
        repo: str,
        workspace: Path,
        home: Path,
        paths: Sequence[str],
        secrets: Iterable[str] = (),
    ) -> Entry | str:
        """Keep ``paths`` of ``workspace`` and the whole ``home``: the entry, or why not (a
        reason with no secret in it: a file name the setup chose may hold one)."""
        values = [s for s in secrets if len(s) >= 4]
        try:
            return await self._store(key, repo, workspace, home, paths, values)
        except (OSError, RestoreFailed, UnsafeState) as e:
            return f"not cached: {mask(str(e), values)[-300:]}"

    async def _store(
        self,
        key: str,
        repo: str,
        workspace: Path,
        home: Path,
        paths: Sequence[str],
        secrets: Sequence[str],
    ) -> Entry | str:
        if self.find(key) is not None:
            return "an entry for this key exists already"
        ensure_real_dir(self.root)
        staging = self.root / f".staging-{key}-{uuid.uuid4().hex[:8]}"
        try:
            kept = [p for p in paths if safe_relative(p) and _real_parents(workspace, p)]
            ensure_real_dir(staging)
            ensure_real_dir(staging / "workspace")
            for path in kept:
                _make_parents(staging / "workspace", path)
                await _cp(["-a", str(workspace / path), str(staging / "workspace" / path)])
            if home.is_dir() and not home.is_symlink():
                await _cp(["-a", f"{home}/.", str(staging / "home")])
            else:
                ensure_real_dir(staging / "home")
            leaked = _holding_secret(staging, secrets)
            if leaked is not None:
                where = mask(leaked, secrets)
                return f"not cached: {where} holds one of the repository's secrets"
            size = _seal(staging / "workspace", handed_over=self.links) + _seal(staging / "home")
            now = time.time()
            entry = Entry(key, repo, tuple(kept), size, now, now)
            _write_entry(staging, entry)
            try:
                staging.rename(self._folder(key))
            except OSError:
                return "an entry for this key was stored meanwhile"
        finally:
            if staging.exists():
                shutil.rmtree(staging, ignore_errors=True)
        self.evict()
        return entry

    async def restore(
        self, key: str, workspace: Path, home: Path, staging: Path
    ) -> Restored | None:
        """Put the entry's files into a fresh workspace and home; None (and the entry
        discarded when it is not as stored) when that cannot be done.

        Each path is first made under ``staging`` (a folder of Keel's on the workspace's
        filesystem, outside every sandbox) and then renamed into place: a path that exists
        in the workspace was restored whole, so a restore interrupted by a crash resumes
        where it stopped and never leaves a half tree that looks restored."""
        folder = self._folder(key)
        entry = _read_entry(folder)
        if entry is None:
            return None
        if self.links and await _changed(folder / "workspace"):
            log.warning("cache entry %s of %s is not as stored; discarding it", key, entry.repo)
            self._remove(key)
            return None
        method: Literal["hard links", "copy"] = "hard links" if self.links else "copy"
        try:
            if staging.exists():
                _make_writable(staging)
                shutil.rmtree(staging)
            ensure_real_dir(staging)
            for path in entry.paths:
                if not safe_relative(path) or os.path.lexists(workspace / path):
                    continue
                _make_parents(workspace, path)
                _make_parents(staging, path)
                source = str(folder / "workspace" / path)
                method = await self._copy(source, str(staging / path), method)
                os.rename(staging / path, workspace / path)
            if not any(home.iterdir()):
                # The home is copied: what tools write there in place (package caches) must
                # not reach the entry. A folder renamed over the empty home keeps its path.
                await _cp(["-a", str(folder / "home"), str(staging / ".home")])
                os.rename(staging / ".home", home)
        except (OSError, RestoreFailed, UnsafeState) as e:
            log.warning("restoring cache entry %s failed: %s", key, e)
            return None
        finally:
            shutil.rmtree(staging, ignore_errors=True)
        used = Entry(**(asdict(entry) | {"last_used": time.time()}))
        _write_entry(folder, used)
        return Restored(used, method)

    async def _copy(
        self, source: str, target: str, method: Literal["hard links", "copy"]
    ) -> Literal["hard links", "copy"]:
        if method == "hard links":
            try:
                await _cp(["-al", source, target])
                return method
            except RestoreFailed:  # another filesystem: a copy, from here on
                _remove_path(Path(target))
        await _cp(["-a", source, target])
        return "copy"

    def _remove(self, key: str) -> None:
        folder = self._folder(key)
        if folder.exists():
            aside = self.root / f".removing-{key}-{uuid.uuid4().hex[:8]}"
            try:
                folder.rename(aside)  # no restore starts from a half-removed entry
            except OSError:
                return
            _make_writable(aside)
            shutil.rmtree(aside, ignore_errors=True)


class RestoreFailed(Exception):
    pass


def safe_relative(path: str) -> bool:
    """A path inside the workspace by its text: relative, no ``..``, not in ``.git``."""
    parts = Path(path).parts
    if not parts or path.startswith("/") or "\x00" in path:
        return False
    return ".." not in parts and parts[0] != ".git"


def _real_parents(base: Path, path: str) -> bool:
    """Every folder between ``base`` and ``path`` is a real folder (not a link)."""
    current = base
    for part in Path(path).parts[:-1]:
        current = current / part
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except OSError:
            return False
    return True


def _make_parents(base: Path, path: str) -> None:
    current = base
    for part in Path(path).parts[:-1]:
        current = current / part
        ensure_real_dir(current)  # refuses a link in the way


async def _cp(args: Sequence[str]) -> None:
    result = await run_process([host_program("cp"), *args], timeout_s=3600)
    if not result.ok:
        raise RestoreFailed(result.stderr.strip()[-300:])


def _files(root: Path) -> Iterator[tuple[Path, os.stat_result]]:
    for folder, dirs, names in os.walk(root):
        for name in [*dirs, *names]:
            path = Path(folder, name)
            try:
                yield path, os.lstat(path)
            except OSError:
                continue


def _holding_secret(root: Path, secrets: Sequence[str]) -> str | None:
    """The first regular file (relative) under ``root`` whose bytes contain a secret."""
    if not secrets:
        return None
    needles = [s.encode() for s in secrets]
    overlap = max(len(n) for n in needles)
    for path, info in _files(root):
        if not stat.S_ISREG(info.st_mode) and not stat.S_ISLNK(info.st_mode):
            continue
        if stat.S_ISLNK(info.st_mode):
            if any(n in os.fsencode(os.readlink(path)) for n in needles):
                return str(path.relative_to(root))
            continue
        with path.open("rb") as f:
            tail = b""
            while chunk := f.read(_SCAN_CHUNK):
                window = tail + chunk
                if any(n in window for n in needles):
                    return str(path.relative_to(root))
                tail = window[-overlap:]
    return None


def _seal(root: Path, *, handed_over: bool = False) -> int:
    """The size in bytes of the files under ``root``; with ``handed_over``, each file is
    given to ``CACHE_OWNER`` and made read-only (readable by all): hard-linked into a
    workspace, it is then a file the sandbox can read but neither write nor chmod, since it
    runs as Keel's user with no capability. Only Keel as root can do this."""
    size = 0
    for path, info in _files(root):
        if stat.S_ISREG(info.st_mode):
            size += info.st_size
            if handed_over:
                mode = stat.S_IMODE(info.st_mode)
                readable = (mode & ~0o7222) | 0o444 | (0o111 if mode & 0o100 else 0)
                os.chown(path, CACHE_OWNER, CACHE_OWNER, follow_symlinks=False)
                os.chmod(path, readable)  # a regular file by lstat, in Keel's own folder
    return size


async def _changed(root: Path) -> bool:
    """Whether a file under ``root`` is no longer ``CACHE_OWNER``'s and read-only (``find``
    walks faster than Python)."""
    found = await run_process(
        [
            host_program("find"), str(root), "-type", "f",
            "(", "!", "-uid", str(CACHE_OWNER), "-o", "-perm", "/222", ")", "-print", "-quit",
        ],
        timeout_s=600,
    )
    return not found.ok or bool(found.stdout.strip())


def _make_writable(root: Path) -> None:
    for path, info in _files(root):
        if stat.S_ISDIR(info.st_mode):
            os.chmod(path, stat.S_IMODE(info.st_mode) | 0o700)


def _remove_path(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path, ignore_errors=True)


def _read_entry(folder: Path) -> Entry | None:
    try:
        record = json.loads((folder / "entry.json").read_text())
        return Entry(
            key=str(record["key"]),
            repo=str(record["repo"]),
            paths=tuple(str(p) for p in record["paths"]),
            bytes=int(record["bytes"]),
            created_at=float(record["created_at"]),
            last_used=float(record["last_used"]),
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _write_entry(folder: Path, entry: Entry) -> None:
    tmp = folder / f"entry.json.{uuid.uuid4().hex[:8]}"
    tmp.write_text(json.dumps(asdict(entry)))
    os.replace(tmp, folder / "entry.json")
