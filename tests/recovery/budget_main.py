"""A worker for the budget's kill-point test: the test stack whose agent has a cost budget
that the scripted model spends in a few turns.

Usage: python -m tests.recovery.budget_main DB_URL FOLDER
It exits by itself once FOLDER/stop exists; KEEL_FAULT may SIGKILL it first.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path
from typing import Any

from runtime.config import ModelPrice
from runtime.executor.accounting import Accounting
from tests.harness import agent, build_stack

PRICE = ModelPrice(input_per_million=1_000.0, output_per_million=1_000.0)


def script() -> dict[str, Any]:
    turns = [
        {"say": f"step {n}", "tool_calls": [{"name": "lookup", "args": {"key": f"k{n}"}}]}
        for n in range(40)
    ]
    return {"scripts": [{"turns": [*turns, {"say": "all done"}]}]}


async def main(db_url: str, folder: Path) -> None:
    agents = {"default": agent(["lookup"], max_cost_usd=1.0, max_turns=100)}
    stack = build_stack(db_url, folder, script(), agents=agents, lease_seconds=1.0)
    stack.ctx.accounting = Accounting("scripted", {"scripted": PRICE})
    await stack.work_until(folder / "stop", concurrency=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2])))
