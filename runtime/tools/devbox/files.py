"""Devbox file tools: read_file, list_files (read) and write_file, apply_patch (write).

The workspace is shared with sandboxed commands that may change it while a tool runs, so
every path is opened with the no-follow helpers of ``runtime.workspace.paths``: absolute
paths, ``..`` escapes and symlinks leading out of the workspace are refused even if swapped
in mid-call, and writes may not touch ``.git/``. ``git apply`` reads the workspace's own
``.git``, so it runs inside the sandbox.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from pydantic import Field

from runtime.tools.base import Completed, Effect, Started, ToolContext, Unknown
from runtime.tools.devbox.calls import (
    ImmediateTool,
    ToolArgs,
    prepare,
    refused,
    schema,
)
from runtime.workspace.git import workspace_git
from runtime.workspace.paths import (
    PathRefused,
    display,
    list_inside,
    read_inside,
    resolve_inside,
    write_inside_atomic,
)

T = TypeVar("T")

READ_LIMIT = 200_000
LIST_LIMIT = 1000


class PathArgs(ToolArgs):
    path: str = Field(description="path relative to the workspace root")


class ListArgs(ToolArgs):
    path: str = Field(".", description="folder relative to the workspace root")


class WriteArgs(ToolArgs):
    path: str = Field(description="path relative to the workspace root")
    content: str = Field(description="the complete new content of the file")


class PatchArgs(ToolArgs):
    unified_diff: str = Field(min_length=1, description="a unified diff (git diff format)")


class ReadFile(ImmediateTool):
    name = "read_file"
    description = "Read a text file of the workspace."
    parameters = schema(PathArgs)
    effect: Effect = "read"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        read = partial(read_inside, limit=READ_LIMIT)
        found = await _look(PathArgs, args, ctx, read, kind="file", verb="read")
        return found if isinstance(found, Completed) else Completed(output=as_text(*found))


async def _look(
    model: type[PathArgs | ListArgs],
    args: dict[str, Any],
    ctx: ToolContext,
    read: Callable[[Path, str], T],
    *,
    kind: str,
    verb: str,
) -> T | Completed:
    """Runs ``read`` on the path the model asked for, off the event loop; each way it can
    fail becomes a refusal the model can act on (read_file and list_files word them alike)."""
    prepared = prepare(model, args, ctx)
    if isinstance(prepared, Completed):
        return prepared
    parsed, ws = prepared
    try:
        return await asyncio.to_thread(read, ws, parsed.path)
    except PathRefused as e:
        return refused(str(e))
    except (FileNotFoundError, NotADirectoryError):
        return refused(f"{parsed.path!r} is not a {kind} in the workspace")
    except OSError as e:
        return refused(f"cannot {verb} {parsed.path!r}: {e.strerror or e}")


def as_text(data: bytes, size: int) -> str:
    if b"\x00" in data[:8192]:
        return f"[binary file, {size} bytes]"
    text = data.decode("utf-8", "replace")
    return text if size <= READ_LIMIT else f"{text}\n[... truncated: {size} bytes in total]"


class ListFiles(ImmediateTool):
    name = "list_files"
    description = "List the files under a folder of the workspace (recursive, without .git)."
    parameters = schema(ListArgs)
    effect: Effect = "read"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        listed = partial(list_inside, limit=LIST_LIMIT)
        entries = await _look(ListArgs, args, ctx, listed, kind="folder", verb="list")
        if isinstance(entries, Completed):
            return entries
        listing = "\n".join(entries[:LIST_LIMIT])
        if len(entries) > LIST_LIMIT:
            listing += f"\n[... {len(entries) - LIST_LIMIT} more entries]"
        return Completed(output=listing or "(empty)")


class WriteFile:
    name = "write_file"
    description = "Create or replace a file of the workspace with the given content."
    parameters = schema(WriteArgs)
    effect: Effect = "write"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        prepared = prepare(WriteArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        content = parsed.content.encode()
        try:
            await asyncio.to_thread(write_inside_atomic, ws, parsed.path, content)
        except PathRefused as e:
            return refused(str(e))
        except OSError as e:
            return refused(f"cannot write {parsed.path!r}: {e.strerror or e}")
        return Completed(output=f"wrote {len(content)} bytes to {parsed.path}")

    async def poll(self, handle: str, ctx: ToolContext) -> Completed:
        return refused(f"{handle!r}: write_file has no pending work to poll")

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """The write took effect if the file holds exactly the requested content."""
        prepared = prepare(WriteArgs, args, ctx)
        if isinstance(prepared, Completed):
            return Unknown(prepared.output)
        parsed, ws = prepared
        expected = parsed.content.encode()
        try:
            limit = len(expected) + 1
            current, _ = await asyncio.to_thread(read_inside, ws, parsed.path, limit)
        except (PathRefused, OSError):
            return Unknown(f"{parsed.path} is missing or unreadable")
        if current != expected:
            return Unknown(f"{parsed.path} does not hold the requested content")
        return Completed(output=f"{parsed.path} already holds the requested content")


class ApplyPatch:
    name = "apply_patch"
    description = "Apply a unified diff to the workspace with `git apply`."
    parameters = schema(PatchArgs)
    effect: Effect = "write"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        prepared = prepare(PatchArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        try:
            paths = [
                display(ws, resolve_inside(ws, p, for_write=True))
                for p in patch_paths(parsed.unified_diff)
            ]
        except PathRefused as e:
            return refused(str(e))
        if not paths:
            return refused("the diff names no files; give a unified diff with ---/+++ headers")
        diff = _with_final_newline(parsed.unified_diff).encode()
        result = await workspace_git(ws, ["apply", "--whitespace=nowarn", "-"], stdin=diff)
        if not result.ok:
            return refused(f"git apply refused the patch:\n{result.stderr.strip()}")
        return Completed(output="patched " + ", ".join(sorted(set(paths))))

    async def poll(self, handle: str, ctx: ToolContext) -> Completed:
        return refused(f"{handle!r}: apply_patch has no pending work to poll")

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """Applied if the reverse patch applies cleanly to the workspace as it is now."""
        prepared = prepare(PatchArgs, args, ctx)
        if isinstance(prepared, Completed):
            return Unknown(prepared.output)
        parsed, ws = prepared
        diff = _with_final_newline(parsed.unified_diff).encode()
        result = await workspace_git(ws, ["apply", "--check", "--reverse", "-"], stdin=diff)
        if not result.ok:
            return Unknown("the patch is not (entirely) present in the workspace")
        return Completed(output="the patch is already applied")


_HEADER = re.compile(r"^(?:--- |\+\+\+ |rename from |rename to |copy from |copy to )(.+)$")


def patch_paths(diff: str) -> list[str]:
    """Every file a diff touches, as written in its headers (``a/``/``b/`` prefixes removed)."""
    paths = []
    for line in diff.splitlines():
        match = _HEADER.match(line)
        if match is None:
            continue
        path = match[1].split("\t", 1)[0].strip().strip('"')
        if path == "/dev/null":
            continue
        if line.startswith(("--- ", "+++ ")) and path[:2] in ("a/", "b/"):
            path = path[2:]
        paths.append(path)
    return paths


def _with_final_newline(diff: str) -> str:
    return diff if diff.endswith("\n") else diff + "\n"
