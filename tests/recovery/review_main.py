"""A worker process for the review kill-point test: the test stack with ``submit_review``
against the GitHub emulator the test serves, run until told to stop.

Usage: python -m tests.recovery.review_main DB_URL FOLDER SCRIPT_JSON GITHUB_URL
KEEL_FAULT may SIGKILL it at a fault point; the emulator (in the test's process) keeps what
was posted, as GitHub would.
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from adapters.config import GitHubConfig
from adapters.github.client import GitHubClient
from adapters.github.submit_review import SubmitReview
from adapters.github.toolbase import fixed_repo
from tests.harness import ChildAware, agent, build_stack

REPO = "acme/widgets"
TOKEN = "ghp_review_kill"
BOT = "keel-bot"


async def main(db_url: str, folder: Path, script_path: Path, github_url: str) -> None:
    script = json.loads(script_path.read_text())
    stack = build_stack(db_url, folder, ChildAware(script), lease_seconds=1.0)
    client = GitHubClient.from_config(GitHubConfig(token=TOKEN, api_url=github_url), timeout_s=5)
    review = SubmitReview(client, fixed_repo(REPO), bot_login=BOT)
    stack.ctx.tools = {**stack.ctx.tools, review.name: review}
    stack.ctx.agents = {"default": agent([review.name])}
    await stack.work_until(folder / "stop", concurrency=2)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), sys.argv[4]))
