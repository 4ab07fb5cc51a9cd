"""Multi-workspace install through bolt's OAuth flow against the emulator, in Keel's database.

Two workspaces install Keel through /slack/install; each installation is stored sealed (no
token in the clear); events of each workspace are answered with that workspace's own token
(the emulator refuses the other's); a rotating token is refreshed before use; and an
``app_uninstalled`` removes the workspace: its later events make nothing, the other goes on.
"""

from __future__ import annotations

import asyncio
import html
import re
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from cryptography.fernet import Fernet
from sqlalchemy import select

from adapters.demo.repo import create_sample_repo
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import RunningServer, serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.emulators.webhooks import deliver, sign_slack
from adapters.web.app import create_app
from runtime.store.engine import Database
from runtime.store.models import InstallationRow, SignalRow
from tests.integration.keel_live import PERSON, SIGNING_SECRET, live_config

TEAM_A, TEAM_B = "T0KEEL0001", "T0TEAMB002"
CHANNEL_A, CHANNEL_B = "C0KEELGEN1", "C0TEAMBGEN"
KEY = Fernet.generate_key().decode()


@dataclass
class Installed:
    url: str
    db_url: str
    slack: SlackState


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def oauth_keel(tmp_path: Path, db_url: str) -> Iterator[Installed]:
    slack = SlackState()
    slack.add_channel(CHANNEL_B, "b-general", team_id=TEAM_B)
    slack.add_user(PERSON, "dana")
    port = _free_port()
    servers: list[RunningServer] = []
    try:
        servers += [serve(create_slack_app(slack)), serve(create_github_app(GitHubState()))]
        oauth = {
            "client_id": slack.oauth.client_id,
            "client_secret": slack.oauth.client_secret,
            "encryption_key": KEY,
            "authorize_url": f"{servers[0].url}/oauth/v2/authorize",
        }
        bare = create_sample_repo(tmp_path / "origin")
        extra = {
            "slack": {"bot_token": None, "oauth": oauth},
            "server": {"public_url": f"http://127.0.0.1:{port}"},
        }
        config = live_config(tmp_path, db_url, servers[0].url, servers[1].url, bare, extra)
        assert config.slack.bot_token is None and config.slack.multi_workspace
        servers.append(serve(create_app(config, workers=False), port=port, lifespan="on"))
        yield Installed(f"http://127.0.0.1:{port}", db_url, slack)
    finally:
        for server in reversed(servers):
            server.stop()


async def _install(keel: Installed, team: str) -> httpx.Response:
    """A person in ``team`` opens /slack/install, clicks Add to Slack and approves."""
    keel.slack.oauth.approving_team = team
    async with httpx.AsyncClient(timeout=10) as browser:
        page = await browser.get(keel.url + "/slack/install")
        assert page.status_code == 200, page.text
        [link] = re.findall(r'href="([^"]*oauth/v2/authorize[^"]*)"', page.text)
        approved = await browser.get(html.unescape(link))
        assert approved.status_code == 302
        # bolt marks its state cookie Secure (https in production); over loopback http the
        # browser here hands it back by hand.
        cookie = page.headers["set-cookie"].split(";", 1)[0]
        return await browser.get(approved.headers["location"], headers={"Cookie": cookie})


def _envelope(team: str, event: dict[str, Any]) -> dict[str, Any]:
    return {
        "team_id": team,
        "api_app_id": "A0KEELAPP1",
        "type": "event_callback",
        "event_id": "Ev" + uuid.uuid4().hex[:10].upper(),
        "event_time": int(time.time()),
        "event": event,
    }


async def _mention(keel: Installed, team: str, channel: str) -> str:
    text = f"<@{keel.slack.bot_user_id}> please look at the build"
    ts = keel.slack.seed_message(channel, text, user=PERSON)
    event = {"type": "app_mention", "user": PERSON, "text": text, "ts": ts, "channel": channel}
    signed = sign_slack(_envelope(team, event), SIGNING_SECRET)
    [response] = await deliver(keel.url + "/slack/events", signed)
    assert response.status_code == 200
    return ts


async def _eyes(keel: Installed, channel: str, ts: str, timeout: float = 15) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        message = keel.slack.find(channel, ts)
        if message is not None and "eyes" in message.reactions:
            return True
        await asyncio.sleep(0.1)
    return False


def _tokens_of(keel: Installed, team: str) -> set[str]:
    return {t for t in keel.slack.tokens if keel.slack.team_of_token(t) == team}


def _rows(db_url: str) -> list[InstallationRow]:
    db = Database.from_url(db_url)
    try:
        return db.read_sync(lambda s: list(s.scalars(select(InstallationRow))))
    finally:
        db.close()


async def test_two_workspaces_install_and_each_is_answered_with_its_own_token(
    db_url: str, tmp_path: Path
) -> None:
    with oauth_keel(tmp_path, db_url) as keel:
        keel.slack.oauth.token_lifetime_s = 60  # workspace A gets a rotating token
        done = await _install(keel, TEAM_A)
        assert done.status_code == 200 and "Thank you" in done.text, done.text
        keel.slack.oauth.token_lifetime_s = None
        assert (await _install(keel, TEAM_B)).status_code == 200
        issued_a, issued_b = _tokens_of(keel, TEAM_A), _tokens_of(keel, TEAM_B)

        rows = _rows(db_url)
        assert {(r.team_id, r.kind) for r in rows} >= {(TEAM_A, "bot"), (TEAM_B, "bot")}
        stored = " ".join(r.sealed for r in rows)
        assert not any(token in stored for token in issued_a | issued_b)  # sealed at rest

        ts_a = await _mention(keel, TEAM_A, CHANNEL_A)
        ts_b = await _mention(keel, TEAM_B, CHANNEL_B)
        assert await _eyes(keel, CHANNEL_A, ts_a) and await _eyes(keel, CHANNEL_B, ts_b)

    reacted = {token for method, token in keel.slack.token_uses if method == "reactions.add"}
    [used_a] = reacted & _tokens_of(keel, TEAM_A)
    [used_b] = reacted & _tokens_of(keel, TEAM_B)
    assert used_b in issued_b
    # A's install token expires within the rotation window: a refreshed one was used.
    assert used_a not in issued_a and used_a.startswith("xoxe.xoxb-")
    refreshed = [r for r in keel.slack.requests if r.path.endswith("oauth.v2.access")]
    assert any("refresh_token" in str(r.body) for r in refreshed)


@pytest.mark.parametrize("removal", ["app_uninstalled", "tokens_revoked"])
async def test_removed_workspace_is_disabled_and_the_other_goes_on(
    db_url: str, tmp_path: Path, removal: str
) -> None:
    with oauth_keel(tmp_path, db_url) as keel:
        await _install(keel, TEAM_A)
        await _install(keel, TEAM_B)
        keel.slack.revoke_team(TEAM_B)
        event: dict[str, Any] = {"type": removal}
        if removal == "tokens_revoked":
            event["tokens"] = {"bot": [keel.slack.bot_user_id]}
        removed = sign_slack(_envelope(TEAM_B, event), SIGNING_SECRET)
        [response] = await deliver(keel.url + "/slack/events", removed)
        assert response.status_code == 200

        bots = {r.team_id for r in _rows(db_url) if r.kind == "bot"}
        assert bots == {TEAM_A}  # B's bot token is gone from Keel's database
        ts_b = await _mention(keel, TEAM_B, CHANNEL_B)
        ts_a = await _mention(keel, TEAM_A, CHANNEL_A)
        assert await _eyes(keel, CHANNEL_A, ts_a)
        db = Database.from_url(db_url)
        try:
            signals = db.read_sync(lambda s: list(s.scalars(select(SignalRow))))
        finally:
            db.close()

    mentions = [s for s in signals if s.kind == "mention"]
    assert [(s.thread_ref or "").split("/")[0] for s in mentions] == [f"slack:{TEAM_A}"]
    assert not await _eyes(keel, CHANNEL_B, ts_b, timeout=0.5)
