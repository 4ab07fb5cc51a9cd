"""A worker for the brief's kill-point test: the test stack, its brief read from the Slack
emulator the test runs, by the real Slack context source; run until told to stop.

Usage: python -m tests.recovery.brief_main DB_URL FOLDER SLACK_URL
It exits by itself once FOLDER/stop exists; KEEL_FAULT may SIGKILL it first.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from slack_sdk.web.async_client import AsyncWebClient

from adapters.briefing import ThreadContext
from adapters.slack.context import SlackReaders
from adapters.slack.signals import SlackIdentity
from adapters.slack.workspaces import SingleWorkspace, WebSessions
from runtime.brief.port import Briefing
from runtime.config import ContextConfig
from tests.harness import build_stack

TOKEN = "xoxb-keel-emulated"
IDENTITY = SlackIdentity("T0KEEL0001", "U0KEELBOT1", "B0KEELBOT1", "A0KEELAPP1")
REPORT = "checkout is broken, KeyError 'sku' in cart.py"
SCRIPT = {"scripts": [{"turns": [{"expect_seen": [f"alice: {REPORT}"], "say": "seen it"}]}]}


async def main(db_url: str, folder: Path, slack_url: str) -> None:
    stack = build_stack(db_url, folder, SCRIPT, lease_seconds=1.0)
    settings = ContextConfig()
    api = f"{slack_url}/api/"
    client = AsyncWebClient(token=TOKEN, base_url=api, retry_handlers=[])
    slack = SlackReaders(SingleWorkspace(client, IDENTITY), WebSessions(), api, settings)
    stack.ctx.briefing = Briefing(ThreadContext(slack, None), settings)
    await stack.work_until(folder / "stop", concurrency=1)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), sys.argv[3]))
