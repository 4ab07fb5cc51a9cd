"""Test tools at the project's own Tool port, with effects counted in files.

Counting in files (not memory) lets the crash tests check "at most once" across processes.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, ClassVar

from runtime.evidence import EvidenceItem, Strength
from runtime.tools.base import Completed, Effect, Pending, Started, ToolContext, Unknown


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def _append(path: Path, line: str) -> None:
    with path.open("a", encoding="utf-8") as f:
        f.write(line + "\n")


class Lookup:
    name = "lookup"
    description = "Read a value (safe to repeat)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"key": {"type": "string"}, "sleep_s": {"type": "number"}},
    }
    effect: Effect = "read"

    def __init__(self, log: Path) -> None:
        self.log = log

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        import asyncio

        _append(self.log, f"start {ctx.call_id}")
        await asyncio.sleep(float(args.get("sleep_s", 0)))
        return Completed(f"value of {args.get('key')}")

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("reads are repeated, not reconciled")


class CreateThing:
    """A write whose effect is one line in ``effects``; reconciles by call id if allowed."""

    description = "Create a thing (not safe to repeat)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
    }
    effect: Effect = "write"

    def __init__(self, effects: Path, *, name: str = "create_thing", reconciles: bool = True):
        self.effects = effects
        self.name = name
        self.reconciles = reconciles

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        _append(self.effects, f"{ctx.task_id} {ctx.call_id} {args.get('title')}")
        evidence = EvidenceItem("comment", f"thing:{ctx.call_id}", Strength.tool_reported)
        return Completed(f"created {args.get('title')}", evidence=(evidence,))

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        mine = f"{ctx.task_id} {ctx.call_id} "
        if self.reconciles and any(line.startswith(mine) for line in _lines(self.effects)):
            strength = Strength.provider_read_back
            evidence = EvidenceItem("read_back", f"thing:{ctx.call_id}", strength)
            return Completed(f"found {args.get('title')} already created", evidence=(evidence,))
        return Unknown("no way to look it up")


class Sleep:
    """A wait: the work is a deadline recorded in a file keyed by the call id."""

    name = "sleep"
    description = "Wait for some seconds of external work."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"seconds": {"type": "number"}},
    }
    effect: Effect = "wait"

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        marker = self.folder / f"sleep-{ctx.call_id}"
        if not marker.exists():
            marker.write_text(str(time.time() + float(args.get("seconds", 0))))
        return Started(handle=ctx.call_id)

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        until = float((self.folder / f"sleep-{handle}").read_text())
        return Completed("slept") if time.time() >= until else Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("waits are resumed")


class _DoneInStart:
    """A read without arguments that ends (or fails) inside ``start``: nothing to poll, and
    nothing to reconcile, as repeating it is harmless."""

    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    effect: Effect = "read"

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("n/a")


class Explode(_DoneInStart):
    name = "explode"
    description = "A tool with a bug."

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        raise RuntimeError("kaboom")


class Instant(_DoneInStart):
    """Returns at once: what a tool call costs the executor, without the tool's own work."""

    name = "instant"
    description = "returns at once"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        return Completed("ok")


class Blob:
    """A read that returns ``size`` characters: a large file, a long log."""

    name = "blob"
    description = "Read a large output."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"path": {"type": "string"}, "size": {"type": "integer"}},
    }
    effect: Effect = "read"

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        line = f"{args.get('path')}: line of output\n"
        size = int(args.get("size", 1000))
        return Completed((line * (size // len(line) + 1))[:size])

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("reads are repeated, not reconciled")


class OpenPull:
    """A write that opens a pull request (a line in ``pulls``; its number is the line's) and
    reports it as evidence, as open_pull_request does; reconciles by call id."""

    name = "open_pull"
    description = "Open a pull request (not safe to repeat)."
    parameters: ClassVar[dict[str, Any]] = {
        "type": "object",
        "properties": {"title": {"type": "string"}},
    }
    effect: Effect = "write"
    repo = "acme/shop"
    head_sha = "a" * 40

    def __init__(self, pulls: Path) -> None:
        self.pulls = pulls

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        _append(self.pulls, f"{ctx.task_id} {ctx.call_id} {args.get('title')}")
        return self._opened(len(_lines(self.pulls)))

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        mine = f"{ctx.task_id} {ctx.call_id} "
        for number, line in enumerate(_lines(self.pulls), start=1):
            if line.startswith(mine):
                return self._opened(number)
        return Unknown("no pull request for this call")

    def _opened(self, number: int) -> Completed:
        detail = {
            "repo": self.repo,
            "number": number,
            "head_ref": "keel/fix",
            "head_sha": self.head_sha,
        }
        url = f"https://github.com/{self.repo}/pull/{number}"
        evidence = EvidenceItem("pull_request", url, Strength.provider_read_back, detail)
        return Completed(f"opened {url}", evidence=(evidence,))
