"""What an agent's settings grant its tools, as the composition root builds them: network for
commands and pushes to protected branches reach the agent that has them and no other, a
daemon role built on it included."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.executor.context import ExecutorContext
from runtime.executor.runner import Runner
from runtime.tools.base import Completed, ToolContext
from runtime.workspace import Workspaces, WorkspaceSpec
from tests.host import loopback_listener, require_bwrap, run_tool_to_end
from tests.integration.test_devbox_tools import make_bare_repo, sh

AGENTS = {
    "default": {},
    "builder": {"allow_network": True, "allow_protected_push": True},
}
ROLES = [{"id": "nightly", "agent": "builder", "purpose": "p", "watch": [{"provider": "slack"}]}]


@pytest.fixture
async def executor(db_url: str, tmp_path: Path) -> AsyncIterator[ExecutorContext]:
    tree = {
        "database": {"url": db_url},
        "workspace": {"root": str(tmp_path / "ws"), "sandbox": "bwrap"},
        "agents": AGENTS,
        "daemons": {"roles": ROLES},
    }
    keel = Keel(build_config(tree, env={}))
    try:
        await keel.connect()
        runner = keel.worker.runner
        assert isinstance(runner, Runner)
        yield runner.ctx
    finally:
        keel.db.close()


@pytest.fixture
def listener() -> Iterator[tuple[int, list[socket.socket]]]:
    with loopback_listener() as found:
        yield found


@pytest.mark.parametrize(
    ("agent", "reaches"), [("builder", True), ("default", False), ("daemon:nightly", True)]
)
async def test_network_reaches_only_the_agent_that_allows_it_when_configured(
    executor: ExecutorContext,
    tmp_path: Path,
    listener: tuple[int, list[socket.socket]],
    agent: str,
    reaches: bool,
) -> None:
    require_bwrap()
    ws = tmp_path / "ws" / "root-1"
    ws.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    port, accepted = listener
    tool = executor.tools_for(agent)["run_command"]
    result = await run_tool_to_end(tool, ws, f"exec 3<>/dev/tcp/127.0.0.1/{port}", 30)
    await asyncio.sleep(0.3)
    assert ("exit code 0 " in result.output) is reaches
    assert len(accepted) == (1 if reaches else 0)


@pytest.mark.parametrize(("agent", "allowed"), [("builder", True), ("default", False)])
async def test_protected_push_reaches_only_the_agent_that_allows_it_when_configured(
    executor: ExecutorContext, tmp_path: Path, agent: str, allowed: bool
) -> None:
    bare = make_bare_repo(tmp_path, {"README.md": "hello\n"})
    ws = await Workspaces(tmp_path / "ws").ensure(WorkspaceSpec("root-1", str(bare)))
    before = sh("git", "rev-parse", "main", cwd=bare)
    tools = executor.tools_for(agent)
    ctx = ToolContext(task_id="task-1", root_task_id="root-1", call_id="call-1", workspace=ws)
    await tools["write_file"].start({"path": "x.txt", "content": "x"}, ctx)
    await tools["git_commit"].start({"message": "x"}, ctx)
    pushed = await tools["git_push"].start({"branch": "main"}, ctx)
    assert isinstance(pushed, Completed) and pushed.is_error is not allowed, pushed
    after = sh("git", "rev-parse", "main", cwd=bare)
    assert (after != before) is allowed
