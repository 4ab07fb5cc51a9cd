"""The ingest baseline: a bare FastAPI endpoint per provider that verifies and inserts a row.

``python -m bench.bare_ingest --db PATH --port N`` serves ``POST /slack/events`` (v0 HMAC over
``v0:{timestamp}:{body}`` within five minutes) and ``POST /github/webhook`` (HMAC-SHA256 of
the body), and inserts one row per delivery, unique on (provider, delivery id), into SQLite
with Keel's pragmas: WAL, ``synchronous=FULL``, a busy timeout, ``BEGIN IMMEDIATE``. This is
the least any correct ingest endpoint does, measured under the same uvicorn as Keel.

For ``bench.ingest_floor`` it can also do the one thing more that #18 asks of every delivery:
``--slack-api URL --github-api URL`` sends each new delivery's 👀 once its row is committed,
as Keel does (slack_sdk's ``reactions.add`` on a kept-alive aiohttp session; one aiohttp POST
to GitHub's reactions, Keel's own path), in a task of the event loop, 50 at most in flight,
with nothing durable about it. ``--no-store`` skips the insert; ``--group-commit`` makes it
on a thread of its own, deliveries that arrive together sharing one transaction and fsync
(as Keel's SQLite writes do). ``GET /floor/pending`` says
how many 👀 are still to send.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import hmac
import json
import queue
import sqlite3
import sys
import threading
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any

import uvicorn
from fastapi import FastAPI, Request, Response

from bench.emulators import BOT_TOKEN, GITHUB_TOKEN
from bench.world import SIGNING_SECRET, WEBHOOK_SECRET

if TYPE_CHECKING:  # imported when a 👀 is first sent: the baseline's memory is bench.memory's
    import aiohttp
    from slack_sdk.web.async_client import AsyncWebClient

IN_FLIGHT = 50  # the most 👀 sent at once: Keel's outbox sends up to 50 due posts per round

INSERT = ("INSERT INTO signals (provider, delivery_id, body, received_at) VALUES (?, ?, ?, ?)"
          " ON CONFLICT DO NOTHING")
SCHEMA = """CREATE TABLE IF NOT EXISTS signals (
    id INTEGER PRIMARY KEY, provider TEXT NOT NULL, delivery_id TEXT NOT NULL,
    body TEXT NOT NULL, received_at REAL NOT NULL, UNIQUE (provider, delivery_id))"""


def connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute(SCHEMA)
    return conn


def slack_signed(headers: dict[str, str], body: bytes) -> bool:
    stamp = headers.get("x-slack-request-timestamp", "")
    if not stamp.isdigit() or abs(time.time() - int(stamp)) > 300:
        return False
    base = b"v0:" + stamp.encode() + b":" + body
    expected = "v0=" + hmac.new(SIGNING_SECRET.encode(), base, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("x-slack-signature", ""))


def github_signed(headers: dict[str, str], body: bytes) -> bool:
    expected = "sha256=" + hmac.new(WEBHOOK_SECRET.encode(), body, hashlib.sha256).hexdigest()
    return hmac.compare_digest(expected, headers.get("x-hub-signature-256", ""))


class Eyes:
    """Each stored delivery's 👀, sent from the event loop after its row is committed."""

    def __init__(self, slack_api: str, github_api: str) -> None:
        self.slack_api, self.github_api = slack_api, github_api.rstrip("/")
        self._tasks: set[asyncio.Task[None]] = set()
        self._gate: asyncio.Semaphore | None = None
        self._session: aiohttp.ClientSession | None = None
        self._slack: AsyncWebClient | None = None

    def _client(self) -> tuple[aiohttp.ClientSession, AsyncWebClient, asyncio.Semaphore]:
        if self._session is None or self._slack is None or self._gate is None:
            import aiohttp
            from slack_sdk.web.async_client import AsyncWebClient

            self._session = aiohttp.ClientSession()
            self._slack = AsyncWebClient(token=BOT_TOKEN, base_url=self.slack_api,
                                         session=self._session, retry_handlers=[])
            self._gate = asyncio.Semaphore(IN_FLIGHT)
        return self._session, self._slack, self._gate

    def slack(self, event: dict[str, object]) -> None:
        self._start(self._slack_eyes(str(event["channel"]), str(event["ts"])))

    def github(self, payload: dict[str, Any]) -> None:
        repo, comment = payload["repository"]["full_name"], payload["comment"]["id"]
        self._start(self._github_eyes(f"/repos/{repo}/issues/comments/{comment}/reactions"))

    @property
    def pending(self) -> int:
        return len(self._tasks)

    def _start(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            print(f"a 👀 failed: {task.exception()!r}", file=sys.stderr)

    async def _slack_eyes(self, channel: str, ts: str) -> None:
        _, slack, gate = self._client()
        async with gate:
            await slack.reactions_add(channel=channel, timestamp=ts, name="eyes")

    async def _github_eyes(self, path: str) -> None:
        session, _, gate = self._client()
        headers = {"Authorization": f"token {GITHUB_TOKEN}",
                   "Accept": "application/vnd.github.squirrel-girl-preview"}
        async with gate, session.post(self.github_api + path, json={"content": "eyes"},
                                      headers=headers) as response:
            await response.text()
            response.raise_for_status()


class GroupInsert:
    """Inserts made on a thread of their own, those waiting together in one transaction."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self._conn = conn
        self._queue: queue.SimpleQueue[tuple[tuple[str, str, str, float],
                                             asyncio.AbstractEventLoop,
                                             asyncio.Future[bool]]] = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True).start()

    async def insert(self, provider: str, delivery_id: str, body: bytes) -> bool:
        loop = asyncio.get_running_loop()
        done: asyncio.Future[bool] = loop.create_future()
        self._queue.put(((provider, delivery_id, body.decode("utf-8"), time.time()), loop, done))
        return await done

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while len(batch) < 64:
                try:
                    batch.append(self._queue.get_nowait())
                except queue.Empty:
                    break
            self._conn.execute("BEGIN IMMEDIATE")
            new = [self._conn.execute(INSERT, row).rowcount == 1 for row, _, _ in batch]
            self._conn.execute("COMMIT")
            loop = batch[0][1]  # one event loop serves the app
            outcomes = [(done, n) for (_, _, done), n in zip(batch, new, strict=True)]
            loop.call_soon_threadsafe(_settle, outcomes)


def _settle(outcomes: list[tuple[asyncio.Future[bool], bool]]) -> None:
    for done, new in outcomes:
        done.set_result(new)


def create_bare_app(
    db_path: str, eyes: Eyes | None = None, store: bool = True, group: bool = False
) -> FastAPI:
    conn = connect(db_path)
    app = FastAPI()
    committer = GroupInsert(conn) if group else None

    def insert(provider: str, delivery_id: str, body: bytes) -> bool:
        """Whether the delivery is new."""
        if not store:
            return True
        conn.execute("BEGIN IMMEDIATE")
        cursor = conn.execute(INSERT, (provider, delivery_id, body.decode("utf-8"), time.time()))
        conn.execute("COMMIT")
        return cursor.rowcount == 1

    @app.post("/slack/events")
    async def slack(request: Request) -> Response:
        body = await request.body()
        if not slack_signed(dict(request.headers), body):
            return Response(status_code=401)
        envelope = json.loads(body)
        event_id = str(envelope["event_id"])
        new = (insert("slack", event_id, body) if committer is None
               else await committer.insert("slack", event_id, body))
        if eyes is not None and new and "x-slack-retry-num" not in request.headers:
            eyes.slack(envelope["event"])
        return Response(status_code=200)

    @app.post("/github/webhook")
    async def github(request: Request) -> Response:
        body = await request.body()
        if not github_signed(dict(request.headers), body):
            return Response(status_code=401)
        payload = json.loads(body)
        guid = request.headers["x-github-delivery"]
        new = (insert("github", guid, body) if committer is None
               else await committer.insert("github", guid, body))
        if eyes is not None and new:
            eyes.github(payload)
        return Response(status_code=200)

    @app.get("/floor/pending")
    async def pending() -> int:
        return eyes.pending if eyes is not None else 0

    return app


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--slack-api", help="send each delivery's 👀 to this Slack Web API")
    parser.add_argument("--github-api", help="... and this GitHub REST API")
    parser.add_argument("--no-store", action="store_true", help="verify and parse only")
    parser.add_argument("--group-commit", action="store_true",
                        help="insert on a thread, concurrent deliveries in one transaction")
    args = parser.parse_args()
    eyes = Eyes(args.slack_api, args.github_api) if args.slack_api and args.github_api else None
    uvicorn.run(
        create_bare_app(args.db, eyes, store=not args.no_store, group=args.group_commit),
        host="127.0.0.1", port=args.port, log_level="warning", access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
