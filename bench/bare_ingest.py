"""The ingest baseline: a bare FastAPI endpoint per provider that verifies and inserts a row.

``python -m bench.bare_ingest --db PATH --port N`` serves ``POST /slack/events`` (v0 HMAC over
``v0:{timestamp}:{body}`` within five minutes) and ``POST /github/webhook`` (HMAC-SHA256 of
the body), and inserts one row per delivery, unique on (provider, delivery id), into SQLite
with Keel's pragmas: WAL, ``synchronous=FULL``, a busy timeout, ``BEGIN IMMEDIATE``. This is
the least any correct ingest endpoint does, measured under the same uvicorn as Keel.
"""

from __future__ import annotations

import argparse
import hashlib
import hmac
import json
import sqlite3
import sys
import time

import uvicorn
from fastapi import FastAPI, Request, Response

from bench.world import SIGNING_SECRET, WEBHOOK_SECRET

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


def create_bare_app(db_path: str) -> FastAPI:
    conn = connect(db_path)
    app = FastAPI()

    def insert(provider: str, delivery_id: str, body: bytes) -> None:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute(
            "INSERT INTO signals (provider, delivery_id, body, received_at) VALUES (?, ?, ?, ?)"
            " ON CONFLICT DO NOTHING",
            (provider, delivery_id, body.decode("utf-8"), time.time()),
        )
        conn.execute("COMMIT")

    @app.post("/slack/events")
    async def slack(request: Request) -> Response:
        body = await request.body()
        if not slack_signed(dict(request.headers), body):
            return Response(status_code=401)
        insert("slack", str(json.loads(body)["event_id"]), body)
        return Response(status_code=200)

    @app.post("/github/webhook")
    async def github(request: Request) -> Response:
        body = await request.body()
        if not github_signed(dict(request.headers), body):
            return Response(status_code=401)
        json.loads(body)
        insert("github", request.headers["x-github-delivery"], body)
        return Response(status_code=200)

    return app


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--db", required=True)
    parser.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    uvicorn.run(
        create_bare_app(args.db), host="127.0.0.1", port=args.port, log_level="warning",
        access_log=False,
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
