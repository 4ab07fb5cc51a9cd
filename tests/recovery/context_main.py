"""A worker for the context window's kill-point test: the test stack with a small window and
the scripted model, which logs a fingerprint of every request it receives.

Usage: python -m tests.recovery.context_main DB_URL FOLDER TASK_ID
It exits by itself once FOLDER/stop exists; KEEL_FAULT may SIGKILL it first.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import sys
from dataclasses import asdict
from pathlib import Path

from runtime.executor.fitting import Window
from runtime.models.base import ModelRequest, ModelResponse
from runtime.models.scripted import ScriptedProvider
from tests.harness import agent, build_stack

WINDOW = 4_000
TURNS = 8
OUTPUT_CHARS = 10_000


def script() -> dict[str, object]:
    reads = [
        {
            "say": f"reading part {n}",
            "tool_calls": [
                {"name": "blob", "args": {"path": f"src/p{n}.py", "size": OUTPUT_CHARS}}
            ],
        }
        for n in range(TURNS)
    ]
    last = {"expect_seen": ["keep the changelog"], "say": "all parts read"}
    return {"scripts": [{"turns": [*reads, last]}]}


class Fingerprinting:
    """Appends ``purpose turn sha256`` of each request, the task id replaced, to a file."""

    def __init__(self, log: Path, task_id: str) -> None:
        self.inner = ScriptedProvider.from_dict(script())
        self.log = log
        self.task_id = task_id

    async def complete(self, request: ModelRequest) -> ModelResponse:
        text = json.dumps(asdict(request), sort_keys=True).replace(self.task_id, "TASK")
        digest = hashlib.sha256(text.encode()).hexdigest()[:16]
        with self.log.open("a", encoding="utf-8") as f:
            f.write(f"{request.purpose} {request.turn} {digest}\n")
        return await self.inner.complete(request)


async def main(db_url: str, folder: Path, task_id: str) -> None:
    provider = Fingerprinting(folder / "requests.log", task_id)
    stack = build_stack(
        db_url, folder, provider, agents={"default": agent(["blob"])}, lease_seconds=1.0
    )
    stack.ctx.window = Window(context_window=WINDOW, reply_tokens=256)
    await stack.work_until(folder / "stop", concurrency=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
