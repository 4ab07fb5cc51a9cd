"""A `keel worker`-shaped process for the crash tests: the test stack, run until told to stop.

Usage: python -m tests.recovery.worker_main DB_URL FOLDER SCRIPT_JSON [APPROVAL_TOOLS]
APPROVAL_TOOLS (comma-separated) are tools whose calls wait for an approval.
It exits by itself once FOLDER/stop exists; KEEL_FAULT may SIGKILL it first.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.harness import ChildAware, agent, build_stack


async def main(db_url: str, folder: Path, script_path: Path, approval: str = "") -> None:
    script = json.loads(script_path.read_text())
    stack = build_stack(db_url, folder, ChildAware(script), lease_seconds=1.0)
    if approval:
        tools = tuple(stack.ctx.tools)
        guarded = agent(tools).model_copy(update={"require_approval": tuple(approval.split(","))})
        stack.ctx.agents = {"default": guarded}
    await stack.work_until(folder / "stop", concurrency=2)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), *sys.argv[4:5]))
