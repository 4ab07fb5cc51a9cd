"""A `keel worker`-shaped process for the crash tests: the test stack, run until told to stop.

Usage: python -m tests.recovery.worker_main DB_URL FOLDER SCRIPT_JSON
It exits by itself once FOLDER/stop exists; KEEL_FAULT may SIGKILL it first.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tests.harness import ChildAware, build_stack


async def main(db_url: str, folder: Path, script_path: Path) -> None:
    script = json.loads(script_path.read_text())
    stack = build_stack(db_url, folder, ChildAware(script), lease_seconds=1.0)
    worker = stack.worker(concurrency=2)
    running = asyncio.create_task(worker.run())
    while not (folder / "stop").exists():
        await asyncio.sleep(0.05)
    worker.stop()
    await running
    stack.db.close()


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])))
