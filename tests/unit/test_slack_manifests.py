"""The Slack app manifests in deploy/ ask for what Keel uses, where Keel serves it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from adapters.config import SLACK_BOT_SCOPES
from adapters.slack.app import SLACK_EVENTS_PATH, SLACK_INTERACTIVITY_PATH, SLACK_REDIRECT_PATH

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _manifest(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = yaml.safe_load((DEPLOY / name).read_text())
    return loaded


@pytest.mark.parametrize(
    "name", ["slack-app-manifest.yaml", "slack-app-manifest.socket-mode.yaml"]
)
def test_manifest_asks_for_the_scopes_and_events_keel_uses(name: str) -> None:
    manifest = _manifest(name)
    assert sorted(manifest["oauth_config"]["scopes"]["bot"]) == sorted(SLACK_BOT_SCOPES)
    events = set(manifest["settings"]["event_subscriptions"]["bot_events"])
    assert {"app_mention", "reaction_added", "app_uninstalled", "tokens_revoked"} <= events
    assert manifest["settings"]["interactivity"]["is_enabled"] is True


def test_http_manifest_points_slack_at_keels_routes() -> None:
    settings = _manifest("slack-app-manifest.yaml")["settings"]
    assert settings["socket_mode_enabled"] is False
    assert settings["event_subscriptions"]["request_url"].endswith(SLACK_EVENTS_PATH)
    assert settings["interactivity"]["request_url"].endswith(SLACK_INTERACTIVITY_PATH)
    options = settings["interactivity"]["message_menu_options_url"]
    assert options.endswith(SLACK_INTERACTIVITY_PATH)
    redirects = _manifest("slack-app-manifest.yaml")["oauth_config"]["redirect_urls"]
    assert [url.endswith(SLACK_REDIRECT_PATH) for url in redirects] == [True]


def test_socket_mode_manifest_has_no_request_urls() -> None:
    settings = _manifest("slack-app-manifest.socket-mode.yaml")["settings"]
    assert settings["socket_mode_enabled"] is True
    assert "request_url" not in settings["event_subscriptions"]
    assert "request_url" not in settings["interactivity"]
