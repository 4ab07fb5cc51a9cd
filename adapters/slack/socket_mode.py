"""Slack over Socket Mode: Keel dials out to Slack, so it needs no public HTTPS endpoint.

slack-bolt's asyncio Socket Mode handler (aiohttp) opens the websocket with the app-level
token (``xapp-…``, apps.connections.open), reconnects when Slack says ``disconnect``, and
hands each envelope to the same bolt app as HTTP (``bolt.py``). The envelope is acknowledged
only when that app answered 200, i.e. after the Signal committed; otherwise Slack sends it
again (``retry_attempt``), and the Signal store recognises the event id.
"""

from __future__ import annotations

from slack_bolt.adapter.socket_mode.async_handler import AsyncSocketModeHandler
from slack_bolt.async_app import AsyncApp
from slack_sdk.web.async_client import AsyncWebClient


class SlackSocketMode:
    """The connection's lifecycle; build it inside the running event loop."""

    def __init__(
        self, bolt: AsyncApp, *, app_token: str, api_url: str, ping_interval_s: float = 10.0
    ) -> None:
        self.handler = AsyncSocketModeHandler(
            bolt,
            app_token=app_token,
            web_client=AsyncWebClient(base_url=api_url, retry_handlers=[]),
            ping_interval=ping_interval_s,
        )

    async def start(self) -> None:
        """Connect; returns once the first websocket is open (reconnects run in background)."""
        await self.handler.connect_async()  # type: ignore[no-untyped-call]

    async def stop(self) -> None:
        await self.handler.close_async()  # type: ignore[no-untyped-call]
