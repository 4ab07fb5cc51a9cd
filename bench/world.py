"""What a benchmark's Keel is configured with, and the signed deliveries it is sent.

The configuration points Slack and GitHub at the emulators (``bench.emulators``), uses the
scripted model, and has no repositories, so tasks run without workspaces. Slack mentions
address seeded messages, GitHub comments seeded issues, so each delivery is a new request.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from adapters.emulators.webhooks import SignedRequest, load_github_example, sign_github, sign_slack
from bench.emulators import (
    BOT_TOKEN,
    CHANNEL,
    GITHUB_TOKEN,
    PERSON,
    Emulators,
    comment_id,
    message_ts,
)
from bench.procs import Proc, free_port, keel_command, start, wait_http

SIGNING_SECRET = "bench-signing-secret"
WEBHOOK_SECRET = "bench-webhook-secret"
TEAM_ID = "T0KEEL0001"  # the Slack emulator's team and bot user
BOT_USER_ID = "U0KEELBOT1"
ANSWER_AT_ONCE: dict[str, Any] = {"scripts": [{"turns": [{"say": "done"}]}]}


def keel_config(
    folder: Path,
    emulators: Emulators,
    *,
    db_url: str,
    port: int = 0,
    script: dict[str, Any] | None = None,
    tools: tuple[str, ...] = ("post_update",),
    concurrency: int = 4,
    poll_interval_s: float = 0.2,
) -> Path:
    """Write script.yaml and app.yaml into ``folder``; returns the app.yaml path."""
    script_path = folder / "script.yaml"
    script_path.write_text(yaml.safe_dump(script or ANSWER_AT_ONCE))
    tree = {
        "database": {"url": db_url},
        "server": {"host": "127.0.0.1", "port": port},
        "slack": {
            "bot_token": BOT_TOKEN,
            "signing_secret": SIGNING_SECRET,
            "api_url": emulators.slack_url + "/api/",
        },
        "github": {
            "token": GITHUB_TOKEN,
            "webhook_secret": WEBHOOK_SECRET,
            "api_url": emulators.github_url,
            "bot_login": "keel-bot",
        },
        "model": {"provider": "scripted", "script": str(script_path)},
        "agents": {"default": {"tools": list(tools)}},
        "workspace": {"root": str(folder / "workspaces"), "sandbox": "none"},
        "reporting": {"progress": False},
        "worker": {
            "concurrency": concurrency,
            "poll_interval_s": poll_interval_s,
            "lease_seconds": 30,
        },
    }
    path = folder / "app.yaml"
    path.write_text(yaml.safe_dump(tree))
    return path


def serve_keel(folder: Path, emulators: Emulators, **options: Any) -> tuple[Proc, str, Path]:
    """``keel serve --config`` (HTTP and in-process workers) on SQLite: (process, url, db)."""
    port = free_port()
    db = folder / "keel.db"
    config = keel_config(folder, emulators, db_url=f"sqlite:///{db}", port=port, **options)
    proc = start(keel_command("serve", "--config", str(config)), folder / "keel.log")
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(proc, url + "/readyz")
    except RuntimeError:
        proc.stop()
        raise
    return proc, url, db


def slack_event_id(index: int) -> str:
    return f"EvBENCH{index:08d}"


def slack_mention(index: int, *, retry: int | None = None) -> SignedRequest:
    """An app_mention of the bot on seeded message ``index`` (a new thread each)."""
    ts = message_ts(index)
    envelope = {
        "token": "unused",
        "team_id": TEAM_ID,
        "api_app_id": "A0KEELAPP1",
        "type": "event_callback",
        "event_id": slack_event_id(index),
        "event_time": 1_700_000_000,
        "event": {
            "type": "app_mention",
            "user": PERSON[0],
            "text": f"<@{BOT_USER_ID}> please look at the flaky test in {CHANNEL}",
            "ts": ts,
            "channel": CHANNEL,
            "event_ts": ts,
            "channel_type": "channel",
        },
    }
    return sign_slack(envelope, SIGNING_SECRET, retry_num=retry)


def github_delivery_id(number: int) -> str:
    return f"00000000-bench-0000-0000-{number:012d}"


def github_comment(number: int) -> SignedRequest:
    """An ``@keel`` comment on seeded issue ``number``, from a person with write access."""
    payload = load_github_example(
        "issue_comment/created",
        **{
            "comment.body": "@keel please look at the flaky test",
            "comment.id": comment_id(number),
            "issue.number": number,
        },
    )
    return sign_github(
        "issue_comment", payload, WEBHOOK_SECRET, delivery_id=github_delivery_id(number)
    )
