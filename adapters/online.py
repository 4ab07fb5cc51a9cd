"""``keel config check --online``: ask each enabled provider whether the credentials work.

GitHub App: the private key signs a JWT, GitHub answers who the App is (``GET /app``) and
exchanges the JWT for an installation token (the configured installation, or the first one
the App has). Token auth: ``GET /user``. Slack: ``auth.test`` with the bot token. Each line
says what was checked; a failure names the setting to fix and never prints a secret.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from github import Auth, Github, GithubException, GithubIntegration
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError

from adapters.config import AppConfig, GitHubConfig, SlackConfig


@dataclass(frozen=True, slots=True)
class Check:
    ok: bool
    line: str


def online_checks(config: AppConfig, *, timeout_s: int = 15) -> list[Check]:
    checks: list[Check] = []
    if config.github.enabled:
        checks.append(_github(config.github, timeout_s))
    if config.slack.enabled and config.slack.bot_token is not None:
        checks.append(_slack(config.slack, timeout_s))
    return checks


def _github(config: GitHubConfig, timeout_s: int) -> Check:
    try:
        if config.token is not None:
            github = Github(
                base_url=config.api_url.rstrip("/"),
                auth=Auth.Token(config.token.get_secret_value()),
                timeout=timeout_s,
                retry=None,
            )
            login = github.get_user().login
            return Check(True, f"github: token accepted, acting as {login}")
        app = config.app
        assert app.app_id is not None and app.private_key is not None
        integration = GithubIntegration(
            auth=Auth.AppAuth(app.app_id, app.private_key.get_secret_value()),
            base_url=config.api_url.rstrip("/"),
            timeout=timeout_s,
            retry=None,
        )
        identity = integration.get_app()
        installation = app.installation_id
        if installation is None:
            found: list[Any] = list(integration.get_installations()[:1])
            if not found:
                return Check(False, f"github: App {identity.slug} is not installed anywhere")
            installation = found[0].id
        integration.get_access_token(installation)
    except GithubException as e:
        what = "GITHUB_TOKEN" if config.token is not None else (
            "GITHUB_APP_ID / GITHUB_APP_PRIVATE_KEY / GITHUB_APP_INSTALLATION_ID"
        )
        return Check(False, f"github: refused ({e.status}); check {what}")
    except OSError as e:
        return Check(False, f"github: cannot reach {config.api_url}: {type(e).__name__}")
    return Check(
        True, f"github: App {identity.slug} (id {app.app_id}) issued a token for "
        f"installation {installation}"
    )


def _slack(config: SlackConfig, timeout_s: int) -> Check:
    assert config.bot_token is not None
    client = WebClient(
        token=config.bot_token.get_secret_value(), base_url=config.api_url, timeout=timeout_s
    )
    try:
        answer = client.auth_test()
    except SlackApiError as e:
        error = e.response.get("error")
        return Check(False, f"slack: auth.test refused ({error}); check SLACK_BOT_TOKEN")
    except OSError as e:
        return Check(False, f"slack: cannot reach {config.api_url}: {type(e).__name__}")
    return Check(True, f"slack: auth.test ok, team {answer.get('team')}, bot {answer.get('user')}")
