"""The pooled Slack client overrides slack_sdk's private ``_request``: these tests fail when
an upgrade of slack_sdk moves the seam the override relies on."""

from __future__ import annotations

import inspect
from typing import Any

import aiohttp
import pytest
from slack_sdk.web import async_base_client
from slack_sdk.web.async_base_client import AsyncBaseClient

from adapters.slack.workspaces import WebSessions


def test_slack_sdk_request_keeps_the_keywords_the_override_passes() -> None:
    parameters = inspect.signature(AsyncBaseClient._request).parameters
    assert list(parameters) == ["self", "http_verb", "api_url", "req_args"]
    keywords = ("http_verb", "api_url", "req_args")
    assert all(parameters[name].kind is inspect.Parameter.KEYWORD_ONLY for name in keywords)


async def test_calls_share_the_running_loops_session_when_made_by_different_clients(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    used: list[aiohttp.ClientSession] = []

    async def answer(*, current_session: aiohttp.ClientSession, **kwargs: Any) -> dict[str, Any]:
        used.append(current_session)
        return {"status_code": 200, "headers": {}, "data": {"ok": True}}

    monkeypatch.setattr(async_base_client, "_request_with_session", answer)
    sessions = WebSessions()
    try:
        for token in ("xoxb-one-workspace", "xoxb-another-workspace"):
            await sessions.client(token, "http://127.0.0.1:9/api/").api_call("auth.test")
        assert used == [sessions.session(30), sessions.session(30)]
    finally:
        await sessions.close()
    assert all(session.closed for session in used)
