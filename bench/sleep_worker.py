"""``keel worker`` plus one benchmark tool, ``sleep``: 50 ms of I/O-bound waiting.

``python -m bench.sleep_worker --config FILE --effects FILE`` is ``keel worker`` (the same
``Keel`` composition root, the same worker loop and shutdown) whose tool set also holds
``sleep``. Each call sleeps 50 ms and appends ``<task id> <call id> <pid>`` to the effects
file, so the scale-out benchmark can prove from the effects that no call ran twice.
Keel has no way to register a tool from configuration, hence this subclass.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from adapters.assembly import Keel
from adapters.config import load_config
from runtime.config import AgentConfig
from runtime.tools.base import Completed, Effect, Pending, Started, Tool, ToolContext, Unknown

SLEEP_S = 0.05


class Sleep:
    name = "sleep"
    description = "waits 50 ms, like a tool waiting on I/O"
    parameters: ClassVar[dict[str, Any]] = {"type": "object", "properties": {}}
    effect: Effect = "write"

    def __init__(self, effects: Path) -> None:
        self.effects = effects

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        await asyncio.sleep(SLEEP_S)
        line = f"{ctx.task_id} {ctx.call_id} {os.getpid()}\n".encode()
        fd = os.open(self.effects, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one short O_APPEND write: whole lines, across processes
        finally:
            os.close(fd)
        return Completed("slept")

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return Pending()

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("a sleep leaves nothing to find")


class SleepKeel(Keel):
    effects: Path

    def _agent_tools(
        self, agents: Mapping[str, AgentConfig]
    ) -> tuple[dict[str, Tool], dict[str, dict[str, Tool]]]:
        common, by_agent = super()._agent_tools(agents)
        sleep: Tool = Sleep(self.effects)
        return {**common, "sleep": sleep}, {n: {**t, "sleep": sleep} for n, t in by_agent.items()}


async def run(config_path: str, effects: Path) -> None:
    keel = SleepKeel(load_config(config_path))
    keel.effects = effects
    keel.migrate()
    await keel.connect()
    await keel.start(workers=True, intake=False)  # as keel worker starts
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"worker {keel.worker.name} running", flush=True)
    await stop.wait()
    await keel.stop()


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True)
    parser.add_argument("--effects", required=True, type=Path)
    args = parser.parse_args()
    asyncio.run(run(args.config, args.effects))
    return 0


if __name__ == "__main__":
    sys.exit(main())
