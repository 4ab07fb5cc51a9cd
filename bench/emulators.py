"""The Slack and GitHub emulators in a process of their own, seeded for a benchmark.

``python -m bench.emulators --messages N --issues N`` serves both on loopback, prints one JSON
line with their URLs, and exits when its stdin closes (the benchmark ended, or died). Seeded:
N Slack messages in ``CHANNEL`` with ts ``message_ts(i)``, and issues 1..N in ``REPO`` whose
commenter (the corpus payload's author) may write, each with the comment ``comment_id(n)``.
``GET {slack}/bench/reactions`` lists each ``reactions.add`` the Slack emulator received,
stamped on arrival with the machine-wide monotonic clock, so another process can measure the
time to the 👀.

A process of its own keeps the emulators' work off the load generator's interpreter lock.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl

import httpx
from fastapi import FastAPI

from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackMessage, SlackState, create_slack_app

CHANNEL = "C0KEELGEN1"
PERSON = ("U0BENCHPAT", "pat")
BOT_TOKEN = "xoxb-keel-emulated"
GITHUB_TOKEN = "ghp-bench-token"
REPO = "Codertocat/Hello-World"  # the repository of the corpus issue_comment payload
COMMENTER = "Codertocat"

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def message_ts(index: int) -> str:
    """The ts of seeded message ``index``: distinct, and valid Slack timestamps."""
    return f"{1_700_000_000 + index // 1_000_000}.{index % 1_000_000:06d}"


class ReactionClock:
    """ASGI middleware: stamp each reactions.add on arrival; serve the stamps on /bench/."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app
        self.arrivals: list[tuple[str, float]] = []
        self.control = FastAPI()
        self.control.get("/bench/reactions")(self._reactions)

    async def _reactions(self) -> list[tuple[str, float]]:
        return list(self.arrivals)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope.get("path", "")
        if path.startswith("/bench/"):
            await self.control(scope, receive, send)
            return
        if path != "/api/reactions.add":
            await self.app(scope, receive, send)
            return
        arrived = time.monotonic()
        body = await _body(receive)
        self.arrivals.append((_timestamp_arg(scope, body), arrived))
        replayed = [{"type": "http.request", "body": body, "more_body": False}]

        async def replay() -> MutableMapping[str, Any]:
            return replayed.pop() if replayed else await receive()

        await self.app(scope, replay, send)


async def _body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _timestamp_arg(scope: Scope, body: bytes) -> str:
    headers = dict(scope.get("headers", []))
    text = body.decode("utf-8", "replace")
    if b"json" in headers.get(b"content-type", b""):
        return str(json.loads(text or "{}").get("timestamp", ""))
    query = scope.get("query_string", b"").decode()
    return str(dict(parse_qsl(text) + parse_qsl(query)).get("timestamp", ""))


def comment_id(number: int) -> int:
    """The id of the seeded comment on issue ``number``, which the webhook payloads name."""
    return 900_000_000 + number


def seeded_slack(messages: int) -> SlackState:
    slack = SlackState()
    slack.add_user(*PERSON, real_name="Pat")
    slack.messages.extend(
        SlackMessage(CHANNEL, message_ts(i), "a request", PERSON[0]) for i in range(messages)
    )
    return slack


def seeded_github(issues: int) -> GitHubState:
    github = GitHubState()
    github.add_token(GITHUB_TOKEN, "keel-bot")
    github.add_repo(REPO)
    github.set_permission(REPO, COMMENTER, "write")
    for i in range(issues):
        number = github.add_issue(REPO, f"issue {i + 1}", user=COMMENTER)
        # The comment each delivery is about, so its 👀 lands on it as in production.
        github.add_comment(REPO, number, "@keel please look at the flaky test", user=COMMENTER,
                           comment_id=comment_id(number))
    return github


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=0)
    parser.add_argument("--issues", type=int, default=0)
    args = parser.parse_args()
    slack = serve(ReactionClock(create_slack_app(seeded_slack(args.messages))))
    github = serve(create_github_app(seeded_github(args.issues)))
    sys.stdout.write(json.dumps({"slack": slack.url, "github": github.url}) + "\n")
    sys.stdout.flush()
    sys.stdin.read()  # until the benchmark closes our stdin or goes away
    slack.stop()
    github.stop()
    return 0


@dataclass
class Emulators:
    """A running emulator process, seen from the benchmark."""

    process: subprocess.Popen[str]
    slack_url: str
    github_url: str

    def reactions(self) -> list[tuple[str, float]]:
        """(message ts, monotonic arrival) of every reactions.add so far."""
        response = httpx.get(self.slack_url + "/bench/reactions", timeout=30)
        response.raise_for_status()
        return [(str(ts), float(at)) for ts, at in response.json()]

    def stop(self) -> None:
        if self.process.stdin is not None:
            self.process.stdin.close()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_emulators(*, messages: int = 0, issues: int = 0) -> Emulators:
    command = [sys.executable, "-m", "bench.emulators", f"--messages={messages}",
               f"--issues={issues}"]
    process = subprocess.Popen(
        command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    if not line:
        process.wait()
        raise RuntimeError(f"the emulators did not start (exit {process.returncode})")
    urls = json.loads(line)
    return Emulators(process, urls["slack"], urls["github"])


if __name__ == "__main__":
    sys.exit(main())
