"""Keel's Slack side built from ``slack:`` config: workspaces, the bolt app, and the transport
``keel serve`` uses (HTTP routes, or Socket Mode when ``slack.app_token`` is set).

Single-token mode (``slack.bot_token``) reads the bot's identity once here (auth.test);
OAuth mode (``slack.oauth``) keeps installations sealed in Keel's database and serves the
install flow. Either way every Web API call goes through ``workspaces.client(team)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from adapters.config import SlackConfig
from adapters.slack.surface import fetch_slack_identity, slack_client
from adapters.slack.workspaces import InstalledWorkspaces, SingleWorkspace, WebSessions
from runtime.clock import Clock
from runtime.store.engine import Database

if TYPE_CHECKING:
    from slack_bolt.async_app import AsyncApp
    from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow

    from adapters.slack.app import SlackEvents
    from adapters.slack.socket_mode import SlackSocketMode
    from routing.sink import SignalSink

Workspaces = SingleWorkspace | InstalledWorkspaces


@dataclass
class SlackConnection:
    """The bolt app (and with it slack-bolt, its web framework adapters and the OAuth flow)
    is built on first use, by ``keel serve``'s routes or Socket Mode: ``keel worker`` only
    needs the workspaces, and does not import slack-bolt at all."""

    config: SlackConfig
    workspaces: Workspaces
    sessions: WebSessions  # every Web API client's, closed by ``close``
    clock: Clock
    db: Database
    sink: SignalSink
    public_url: str | None = None
    socket: SlackSocketMode | None = None
    _bolt: AsyncApp | None = field(default=None, init=False, repr=False)

    @classmethod
    async def connect(
        cls,
        config: SlackConfig,
        db: Database,
        clock: Clock,
        sink: SignalSink,
        *,
        public_url: str | None = None,
    ) -> SlackConnection:
        sessions = WebSessions()
        workspaces = await _workspaces(config, sessions, db, clock)
        return cls(config, workspaces, sessions, clock, db, sink, public_url)

    @property
    def bolt(self) -> AsyncApp:
        if self._bolt is None:
            from adapters.slack.bolt import build_bolt_app

            flow = _oauth_flow(self.config, self.workspaces, self.db, self.clock, self.public_url)
            self._bolt = build_bolt_app(
                self.workspaces, self.sink, self.clock, api_url=self.config.api_url,
                oauth_flow=flow,
            )
        return self._bolt

    def http_routes(self) -> SlackEvents | None:
        """The signed HTTP routes, unless events come over Socket Mode."""
        if self.config.socket_mode or self.config.signing_secret is None:
            return None
        from adapters.slack.app import SlackEvents

        secret = self.config.signing_secret.get_secret_value()
        return SlackEvents(self.bolt, signing_secret=secret, clock=self.clock)

    def install_routes(self) -> SlackEvents | None:
        """``/slack/install`` and ``/slack/oauth_redirect`` (OAuth mode, either transport)."""
        if not self.config.multi_workspace:
            return None
        from adapters.slack.app import SlackEvents

        secret = self.config.signing_secret.get_secret_value() if self.config.signing_secret else ""
        return SlackEvents(self.bolt, signing_secret=secret, clock=self.clock)

    async def start_socket_mode(self) -> None:
        if not self.config.socket_mode or self.socket is not None:
            return
        assert self.config.app_token is not None
        from adapters.slack.socket_mode import SlackSocketMode

        self.socket = SlackSocketMode(
            self.bolt,
            app_token=self.config.app_token.get_secret_value(),
            api_url=self.config.api_url,
        )
        await self.socket.start()

    async def stop(self) -> None:
        """Stop receiving events; the Web API clients still work until ``close``."""
        if self.socket is not None:
            await self.socket.stop()
            self.socket = None

    async def close(self) -> None:
        """Close the Web API clients' sessions, once nothing posts any more."""
        await self.sessions.close()


async def _workspaces(
    config: SlackConfig, sessions: WebSessions, db: Database, clock: Clock
) -> Workspaces:
    if not config.multi_workspace:
        client = slack_client(config, sessions)
        return SingleWorkspace(client, await fetch_slack_identity(client))
    oauth = config.oauth
    assert oauth.client_id and oauth.client_secret and oauth.encryption_key
    from adapters.slack.installations import SealedInstallationStore, Sealer

    store = SealedInstallationStore(db, Sealer(oauth.encryption_key.get_secret_value()), clock)
    return InstalledWorkspaces(
        store,
        sessions=sessions,
        api_url=config.api_url,
        client_id=oauth.client_id,
        client_secret=oauth.client_secret.get_secret_value(),
        rotation_minutes=oauth.token_rotation_minutes,
    )


def _oauth_flow(
    config: SlackConfig,
    workspaces: Workspaces,
    db: Database,
    clock: Clock,
    public_url: str | None,
) -> AsyncOAuthFlow | None:
    if not isinstance(workspaces, InstalledWorkspaces):
        return None
    from slack_bolt.oauth.async_oauth_flow import AsyncOAuthFlow
    from slack_bolt.oauth.async_oauth_settings import AsyncOAuthSettings

    from adapters.slack.app import SLACK_INSTALL_PATH, SLACK_REDIRECT_PATH
    from adapters.slack.installations import DatabaseStateStore

    oauth = config.oauth
    assert oauth.client_secret is not None
    # Without one, Slack sends people back to the app's only configured redirect URL.
    redirect_uri = oauth.redirect_uri or (
        f"{public_url.rstrip('/')}{SLACK_REDIRECT_PATH}" if public_url else None
    )
    settings = AsyncOAuthSettings(
        client_id=oauth.client_id,
        client_secret=oauth.client_secret.get_secret_value(),
        scopes=list(oauth.scopes),
        redirect_uri=redirect_uri,
        install_path=SLACK_INSTALL_PATH,
        redirect_uri_path=SLACK_REDIRECT_PATH,
        authorization_url=oauth.authorize_url,
        installation_store=workspaces.store,
        installation_store_bot_only=True,
        token_rotation_expiration_minutes=oauth.token_rotation_minutes,
        state_store=DatabaseStateStore(db, clock),
    )
    return AsyncOAuthFlow(settings=settings)
