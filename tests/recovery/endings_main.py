"""A worker for the endings' kill-point test, and the stack the endings' tests run: the
test stack whose agent writes a file in a real checkout of a bare repository and may commit
and push, so each ending has uncommitted work to save.

Usage: python -m tests.recovery.endings_main DB_URL FOLDER
It exits by itself once FOLDER/stop exists; KEEL_FAULT may SIGKILL it first.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from adapters.checkouts import Checkouts
from adapters.emulators.github_git import init_bare_repository
from runtime.config import RepositoryConfig
from runtime.reporting import ThreadReporter
from runtime.tools.base import Tool
from runtime.tools.devbox import GitCommit, GitPush
from runtime.tools.devbox.files import WriteFile
from runtime.workspace import Workspaces
from tests.harness import Stack, agent, build_stack

REPO = "acme/shop"
NOTES = {"name": "write_file", "args": {"path": "NOTES.md", "content": "half done\n"}}
TOOLS = ("write_file", "git_commit", "git_push", "lookup", "sleep")


def origin(folder: Path) -> Path:
    """The bare repository the task's checkout is cloned from and pushes to (made once)."""
    bare = folder / "origin" / f"{REPO}.git"
    if bare.exists():
        return bare
    return init_bare_repository(folder / "origin", REPO, {"README.md": "shop\n"}, "main")


def script(turns: int) -> dict[str, Any]:
    """Write a file, then look things up for ``turns`` turns, then answer."""
    steps = [
        {"say": f"step {n}", "tool_calls": [{"name": "lookup", "args": {"key": f"k{n}"}}]}
        for n in range(turns)
    ]
    return {"scripts": [{"turns": [{"say": "noting", "tool_calls": [NOTES]}, *steps]}]}


def endings_stack(db_url: str, folder: Path, model: dict[str, Any], **limits: Any) -> Stack:
    """The test stack over a checkout of ``origin(folder)``; completions are posted."""
    stack = build_stack(
        db_url, folder, model, agents={"default": agent(TOOLS, **limits)}, lease_seconds=1.0
    )
    ctx = stack.ctx
    git: list[Tool] = [WriteFile(), GitCommit(), GitPush()]
    ctx.tools = {**ctx.tools, **{tool.name: tool for tool in git}}
    repositories = {REPO: RepositoryConfig(url=origin(folder).as_uri(), ref="main")}
    workspaces = Workspaces(folder / "workspaces", sandbox="none")
    ctx.workspace_for = Checkouts(workspaces, repositories, stack.scheduler).workspace_for
    ctx.reporter = ThreadReporter(ctx.clock)
    return stack


async def main(db_url: str, folder: Path) -> None:
    stack = endings_stack(db_url, folder, script(10), max_turns=3)
    await stack.work_until(folder / "stop", concurrency=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
