"""Confinement of tool paths to a workspace, without trusting the workspace between two calls.

A path from the model is accepted only if it is relative and, with every symlink resolved,
still lies inside the workspace; writes may not touch git's ``.git/``, since editing it would
bypass the git tools.

The workspace is shared with sandboxed commands that run while Keel works, so checking a
path and then opening it is a race: a folder swapped for a symlink to ``/`` in between would
make Keel (which holds every secret) read ``/proc/self/environ`` or write anywhere. The
``*_inside`` helpers therefore walk the path one component at a time from a descriptor of
the workspace, opening each with ``O_NOFOLLOW``: the kernel never follows a link. A symlink
met on the way is read with ``readlink`` and its target walked the same way, relative to the
folder that holds it; an absolute target or a ``..`` above the workspace is refused, and
``..`` returns to the descriptor already held rather than asking the kernel for a parent.
"""

from __future__ import annotations

import contextlib
import errno
import itertools
import os
import secrets
import stat
from collections import deque
from collections.abc import Callable
from pathlib import Path, PurePosixPath
from typing import TypeVar

from runtime.errors import Permanent

PROTECTED = (".git",)
MAX_LINKS = 40
MAX_LIST_DEPTH = 64

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FINAL = os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
_LINK_ERRORS = (errno.ELOOP, errno.ENOTDIR)

T = TypeVar("T")


class PathRefused(Permanent):
    """A tool path Keel will not open: it escapes the workspace, touches a protected folder,
    or is not the kind of file the tool works on."""


def resolve_inside(workspace: Path, path: str, *, for_write: bool = False) -> Path:
    """Where ``path`` points inside ``workspace`` right now, or PathRefused saying why not.

    For checks and messages only: the answer may be stale by the time anything opens it.
    Open with ``open_inside`` and its siblings instead.
    """
    _check_syntax(path)
    root = workspace.resolve()
    try:
        target = (root / path).resolve()
    except (OSError, RuntimeError) as e:
        raise PathRefused(f"{path!r} cannot be resolved: {e}") from None
    if not target.is_relative_to(root):
        raise _outside(path)
    relative = target.relative_to(root)
    if for_write and relative.parts and relative.parts[0] in PROTECTED:
        raise _protected(path, relative.parts[0])
    return target


def display(workspace: Path, target: Path) -> str:
    return str(target.relative_to(workspace.resolve())) or "."


def open_inside(
    workspace: Path,
    path: str,
    flags: int = os.O_RDONLY,
    *,
    for_write: bool = False,
    mode: int = 0o644,
) -> int:
    """A descriptor of ``path`` inside ``workspace``, opened without following a link out.

    The final open adds ``O_NONBLOCK``, so a FIFO cannot hang Keel; callers check the kind of
    file with ``fstat``. With ``for_write``, ``.git/`` is refused, and with ``O_CREAT`` as
    well, missing parent folders are created. The caller closes the descriptor.
    """
    create = for_write and bool(flags & os.O_CREAT)

    def final(fd: int, name: str) -> int:
        return os.open(name, flags | _FINAL, mode, dir_fd=fd)

    opened, _ = _walk(workspace, path, final, for_write=for_write, create=create)
    return opened


def read_inside(workspace: Path, path: str, limit: int) -> tuple[bytes, int]:
    """The first ``limit`` bytes of a regular file inside the workspace, and its size.

    Anything but a regular file (a folder, a FIFO, a device, a socket) is refused.
    """
    fd = open_inside(workspace, path)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise PathRefused(f"{path!r} is not a file in the workspace")
        chunks: list[bytes] = []
        remaining = limit
        while remaining > 0:
            chunk = os.read(fd, min(remaining, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            remaining -= len(chunk)
        return b"".join(chunks), info.st_size
    finally:
        os.close(fd)


def read_inside_text(workspace: Path, path: str, limit: int) -> str:
    """The first ``limit`` bytes of a regular file inside the workspace, decoded leniently
    (a report written by a test run, for instance)."""
    data, _ = read_inside(workspace, path, limit)
    return data.decode("utf-8", "replace")


def write_inside_atomic(workspace: Path, path: str, data: bytes, *, mode: int = 0o644) -> None:
    """Replace (or create) ``path`` inside the workspace with ``data`` in one rename.

    Missing parent folders are created one at a time; the content goes to a new temporary
    file (``O_EXCL|O_NOFOLLOW``) in the final folder, renamed over the name within that
    folder's descriptor, so neither step can land outside the workspace. An existing file
    keeps its permission bits; a symlink in the final place is followed like any other.
    """

    def final(fd: int, name: str) -> None:
        if name == ".":
            raise PathRefused(f"{path!r} is a folder")
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            keep = mode
        else:
            if stat.S_ISLNK(info.st_mode):
                raise OSError(errno.ELOOP, os.strerror(errno.ELOOP), name)
            if stat.S_ISDIR(info.st_mode):
                raise PathRefused(f"{path!r} is a folder")
            keep = stat.S_IMODE(info.st_mode) & 0o777 if stat.S_ISREG(info.st_mode) else mode
        _replace_in(fd, name, data, keep)

    _walk(workspace, path, final, for_write=True, create=True)


def list_inside(workspace: Path, path: str, limit: int) -> list[str]:
    """Files and folders (with a trailing ``/``) under a folder of the workspace, sorted.

    Paths are relative to the workspace root. Symlinks are listed, never entered; ``.git``
    folders are skipped. The walk stops once more than ``limit`` entries are found, and does
    not go deeper than MAX_LIST_DEPTH folders.
    """

    def final(fd: int, name: str) -> int:
        return os.open(name, _DIR, dir_fd=fd)

    fd, parts = _walk(workspace, path, final)
    entries: list[str] = []
    try:
        _list(fd, "".join(f"{p}/" for p in parts), entries, limit, MAX_LIST_DEPTH)
    finally:
        os.close(fd)
    return sorted(entries)


def _list(fd: int, prefix: str, entries: list[str], limit: int, depth: int) -> None:
    with os.scandir(fd) as listing:  # a folder of a million files is read only so far
        children = sorted(itertools.islice(listing, limit + 1), key=lambda entry: entry.name)
    for child in children:
        if len(entries) > limit:
            return
        if not child.is_dir(follow_symlinks=False):
            entries.append(prefix + child.name)
            continue
        if child.name in PROTECTED:
            continue
        entries.append(f"{prefix}{child.name}/")
        if depth <= 1:
            continue
        try:
            sub = os.open(child.name, _DIR, dir_fd=fd)
        except OSError:
            continue
        try:
            _list(sub, f"{prefix}{child.name}/", entries, limit, depth - 1)
        finally:
            os.close(sub)


def _replace_in(fd: int, name: str, data: bytes, mode: int) -> None:
    tmp = f".keel-tmp-{secrets.token_hex(8)}"
    out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _FINAL, mode, dir_fd=fd)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        finally:
            os.close(out)
        os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp, dir_fd=fd)
        raise


def _walk(
    workspace: Path,
    path: str,
    final: Callable[[int, str], T],
    *,
    for_write: bool = False,
    create: bool = False,
) -> tuple[T, tuple[str, ...]]:
    """Run ``final(folder_fd, name)`` on the last component of ``path``, reached without
    letting the kernel follow a link; also the real path it reached, relative to the root.

    ``final`` raises ELOOP or ENOTDIR when it meets a symlink; the walk then reads the link
    and continues with its target. A path that ends at a folder (``.``, ``src/..``) reaches
    ``final`` as that folder's descriptor and the name ``.``.
    """
    pending = deque(_check_syntax(path))
    stack = [("", os.open(workspace, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))]
    links = 0
    try:
        while True:
            fd = stack[-1][1]
            name = pending.popleft() if pending else "."
            if name == "..":
                if len(stack) == 1:
                    raise _outside(path)
                os.close(stack.pop()[1])
                continue
            if for_write and len(stack) == 1 and name in PROTECTED:
                raise _protected(path, name)
            try:
                if pending:
                    stack.append((name, _enter(fd, name, create=create)))
                    continue
                result = final(fd, name)
            except OSError as e:
                target = _link_target(fd, name, e)
                links += 1
                if links > MAX_LINKS:
                    raise PathRefused(f"{path!r} has too many levels of symbolic links") from None
                pending.extendleft(reversed(_link_parts(path, target)))
                continue
            real = tuple(n for n, _ in stack[1:]) + ((name,) if name != "." else ())
            return result, real
    finally:
        for _, held in stack:
            os.close(held)


def _enter(fd: int, name: str, *, create: bool) -> int:
    """The folder ``name`` under ``fd``, opened without following a link (made if missing
    and ``create``)."""
    try:
        return os.open(name, _DIR, dir_fd=fd)
    except FileNotFoundError:
        if not create:
            raise
    with contextlib.suppress(FileExistsError):
        os.mkdir(name, dir_fd=fd)
    return os.open(name, _DIR, dir_fd=fd)


def _link_target(fd: int, name: str, error: OSError) -> str:
    """The target of the symlink that made an open fail, or that failure again if ``name``
    is not a symlink."""
    if error.errno not in _LINK_ERRORS:
        raise error
    try:
        return os.readlink(name, dir_fd=fd)
    except OSError:
        raise error from None


def _link_parts(path: str, target: str) -> tuple[str, ...]:
    link = PurePosixPath(target)
    if link.is_absolute():
        raise PathRefused(
            f"{path!r} goes through a symlink to the absolute path {target!r}; only relative "
            "symlinks that stay inside the workspace are followed"
        )
    return link.parts


def _check_syntax(path: str) -> tuple[str, ...]:
    if not path or "\x00" in path:
        raise PathRefused("path must be a non-empty relative path")
    relative = PurePosixPath(path)
    if relative.is_absolute():
        raise PathRefused(f"{path!r} is absolute; give a path relative to the workspace")
    return relative.parts


def _outside(path: str) -> PathRefused:
    return PathRefused(f"{path!r} resolves outside the workspace (via '..' or a symlink)")


def _protected(path: str, folder: str) -> PathRefused:
    return PathRefused(f"{path!r} is inside {folder}/, which tools may not edit")
