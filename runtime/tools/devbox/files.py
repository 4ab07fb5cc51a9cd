"""Devbox file tools: read_file, list_files (read) and write_file, apply_patch (write).

Every path goes through ``resolve_inside``: absolute paths, ``..`` escapes and symlinks
leading out of the workspace are refused, and writes may not touch ``.git/`` or ``.keel/``.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from pydantic import Field

from runtime.tools.base import Completed, Effect, Started, ToolContext, Unknown
from runtime.tools.devbox.calls import (
    ImmediateTool,
    ToolArgs,
    prepare,
    refused,
    schema,
)
from runtime.workspace.git import git
from runtime.workspace.paths import PROTECTED, PathRefused, display, resolve_inside

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
        prepared = prepare(PathArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        try:
            target = resolve_inside(ws, parsed.path)
        except PathRefused as e:
            return refused(str(e))
        if not target.is_file():
            return refused(f"{parsed.path!r} is not a file in the workspace")
        return Completed(output=read_text(target))


def read_text(target: Path) -> str:
    size = target.stat().st_size
    with target.open("rb") as f:
        data = f.read(READ_LIMIT)
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
        prepared = prepare(ListArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        try:
            folder = resolve_inside(ws, parsed.path)
        except PathRefused as e:
            return refused(str(e))
        if not folder.is_dir():
            return refused(f"{parsed.path!r} is not a folder in the workspace")
        entries = list_entries(ws, folder)
        listing = "\n".join(entries[:LIST_LIMIT])
        if len(entries) > LIST_LIMIT:
            listing += f"\n[... {len(entries) - LIST_LIMIT} more entries]"
        return Completed(output=listing or "(empty)")


def list_entries(ws: Path, folder: Path) -> list[str]:
    entries: list[str] = []
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d not in PROTECTED)
        here = Path(dirpath)
        entries += [display(ws, here / d) + "/" for d in dirnames]
        entries += [display(ws, here / f) for f in sorted(filenames)]
        if len(entries) > LIST_LIMIT:
            break
    return sorted(entries)


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
        try:
            target = resolve_inside(ws, parsed.path, for_write=True)
        except PathRefused as e:
            return refused(str(e))
        if target.is_dir():
            return refused(f"{parsed.path!r} is a folder")
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.keel-tmp")
        tmp.write_text(parsed.content, encoding="utf-8")
        os.replace(tmp, target)
        return Completed(output=f"wrote {len(parsed.content.encode())} bytes to {parsed.path}")

    async def poll(self, handle: str, ctx: ToolContext) -> Completed:
        return refused(f"{handle!r}: write_file has no pending work to poll")

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        """The write took effect if the file holds exactly the requested content."""
        prepared = prepare(WriteArgs, args, ctx)
        if isinstance(prepared, Completed):
            return Unknown(prepared.output)
        parsed, ws = prepared
        try:
            target = resolve_inside(ws, parsed.path, for_write=True)
            current = target.read_text(encoding="utf-8")
        except (PathRefused, OSError, UnicodeDecodeError):
            return Unknown(f"{parsed.path} is missing or unreadable")
        if current != parsed.content:
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
        result = await git(["apply", "--whitespace=nowarn", "-"], cwd=ws, stdin=diff)
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
        result = await git(["apply", "--check", "--reverse", "-"], cwd=ws, stdin=diff)
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
