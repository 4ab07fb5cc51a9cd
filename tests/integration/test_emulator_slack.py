"""The Slack emulator driven by the real slack_sdk over loopback sockets, its responses
checked against Slack's Web API description (trimmed to what is checked, in tests/fixtures)."""

from __future__ import annotations

import asyncio
import http.client
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import jsonschema
import pytest
from fastapi import FastAPI, Request
from slack_sdk import WebClient
from slack_sdk.errors import SlackApiError
from slack_sdk.http_retry.builtin_handlers import RateLimitErrorRetryHandler
from slack_sdk.signature import SignatureVerifier
from slack_sdk.web.async_client import AsyncWebClient

from adapters.emulators.contract import SlackContract, load_slack_contract
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.emulators.webhooks import deliver, load_slack_event, sign_slack
from tests.fixtures import SLACK_OPENAPI

TOKEN = "xoxb-keel-emulated"
CHANNEL = "C0KEELGEN1"
ALICE = "U0ALICE001"


@dataclass(frozen=True, slots=True)
class Slack:
    state: SlackState
    url: str

    def client(self, **options: Any) -> WebClient:
        options.setdefault("retry_handlers", [])
        return WebClient(token=TOKEN, base_url=f"{self.url}/api/", **options)


@pytest.fixture(scope="module")
def contract() -> SlackContract:
    return load_slack_contract(SLACK_OPENAPI)


@pytest.fixture
def slack() -> Iterator[Slack]:
    state = SlackState()
    state.add_user(ALICE, "alice", real_name="Alice Example")
    with serve(create_slack_app(state)) as server:
        yield Slack(state, server.url)


def _with_metadata(schema: dict[str, Any]) -> dict[str, Any]:
    """The 2021 description predates message metadata (2022); allow exactly that field."""
    metadata = {
        "type": "object",
        "required": ["event_type", "event_payload"],
        "properties": {"event_type": {"type": "string"}, "event_payload": {"type": "object"}},
    }
    return {**schema, "properties": {**schema["properties"], "metadata": metadata}}


def _validate_replies(contract: SlackContract, body: dict[str, Any]) -> None:
    """The description nests its per-message tuple one level too deep (``items.items``), so
    as written it never constrains a message; apply it as meant: parent, then replies."""
    contract.validate("conversations.replies", body)
    parent, reply = contract.response_schema("conversations.replies")["properties"]["messages"][
        "items"
    ]["items"]
    contract.validate_schema(parent, body["messages"][0])
    for message in body["messages"][1:]:
        contract.validate_schema(reply, message)


def test_auth_test_matches_spec_when_token_is_valid(slack: Slack, contract: SlackContract) -> None:
    response = slack.client().auth_test()

    contract.validate("auth.test", response.data)
    assert (response["user_id"], response["bot_id"]) == (slack.state.bot_user_id, "B0KEELBOT1")


def test_calls_fail_invalid_auth_when_token_is_unknown(slack: Slack) -> None:
    client = WebClient(token="xoxb-wrong", base_url=f"{slack.url}/api/", retry_handlers=[])

    with pytest.raises(SlackApiError) as raised:
        client.chat_postMessage(channel=CHANNEL, text="hi")

    assert raised.value.response["error"] == "invalid_auth"
    assert slack.state.messages == []


def test_calls_fail_not_authed_when_no_token_is_sent(slack: Slack) -> None:
    client = WebClient(base_url=f"{slack.url}/api/", retry_handlers=[])

    with pytest.raises(SlackApiError) as raised:
        client.auth_test()

    assert raised.value.response["error"] == "not_authed"


def test_post_message_matches_spec_when_replying_in_thread(
    slack: Slack, contract: SlackContract
) -> None:
    root = slack.state.seed_message(CHANNEL, "<@U0KEELBOT1> fix the build", user=ALICE)

    response = slack.client().chat_postMessage(channel=CHANNEL, text="on it", thread_ts=root)

    contract.validate("chat.postMessage", response.data)
    assert response["message"]["thread_ts"] == root
    posted = slack.state.find(CHANNEL, response["ts"])
    assert posted is not None and (posted.thread_ts, posted.text) == (root, "on it")


def test_post_message_echoes_metadata_when_metadata_is_attached(
    slack: Slack, contract: SlackContract
) -> None:
    metadata = {"event_type": "keel_task", "event_payload": {"task_id": "t-1"}}

    response = slack.client().chat_postMessage(channel=CHANNEL, text="ack", metadata=metadata)

    schema = contract.response_schema("chat.postMessage")
    message_schema = _with_metadata(contract.definition("objs_message"))
    contract.validate_schema(
        {**schema, "properties": {**schema["properties"], "message": message_schema}}, response.data
    )
    assert response["message"]["metadata"] == metadata


def test_post_message_fails_channel_not_found_when_channel_is_unknown(slack: Slack) -> None:
    with pytest.raises(SlackApiError) as raised:
        slack.client().chat_postMessage(channel="C0NOWHERE1", text="hi")

    assert raised.value.response["error"] == "channel_not_found"


def test_post_message_accepts_form_body_when_sent_form_encoded(slack: Slack) -> None:
    response = slack.client().api_call(
        "chat.postMessage", data={"channel": CHANNEL, "text": "form-encoded"}
    )

    assert response["message"]["text"] == "form-encoded"
    recorded = slack.state.requests_to("POST", "/api/chat.postMessage")[-1]
    assert "x-www-form-urlencoded" in recorded.headers["content-type"]


def test_conversations_replies_matches_spec_when_people_talk_in_a_thread(
    slack: Slack, contract: SlackContract
) -> None:
    slack.state.add_user("U0BOB00001", "bob")
    root = slack.state.seed_message(CHANNEL, "is CI green?", user=ALICE)
    slack.state.seed_message(CHANNEL, "checking", user="U0BOB00001", thread_ts=root)
    slack.state.seed_message(CHANNEL, "thanks", user=ALICE, thread_ts=root)

    response = slack.client().conversations_replies(channel=CHANNEL, ts=root)

    assert isinstance(response.data, dict)
    _validate_replies(contract, response.data)
    assert [m["text"] for m in response["messages"]] == ["is CI green?", "checking", "thanks"]
    assert response["messages"][0]["reply_count"] == 2


def test_conversations_replies_includes_metadata_only_when_include_all_metadata(
    slack: Slack,
) -> None:
    client = slack.client()
    root = slack.state.seed_message(CHANNEL, "please help", user=ALICE)
    metadata = {"event_type": "keel_progress", "event_payload": {"task_id": "t-9"}}
    client.chat_postMessage(channel=CHANNEL, text="working", thread_ts=root, metadata=metadata)

    plain = client.conversations_replies(channel=CHANNEL, ts=root)
    full = client.conversations_replies(channel=CHANNEL, ts=root, include_all_metadata=True)

    assert "metadata" not in plain["messages"][1]
    assert full["messages"][1]["metadata"] == metadata
    assert full["messages"][1]["bot_id"] == slack.state.bot_id


def test_conversations_replies_fails_thread_not_found_when_ts_is_unknown(slack: Slack) -> None:
    with pytest.raises(SlackApiError) as raised:
        slack.client().conversations_replies(channel=CHANNEL, ts="1700000000.000001")

    assert raised.value.response["error"] == "thread_not_found"


def test_chat_update_matches_spec_when_updating_own_message(
    slack: Slack, contract: SlackContract
) -> None:
    client = slack.client()
    posted = client.chat_postMessage(channel=CHANNEL, text="step 1/3")

    response = client.chat_update(channel=CHANNEL, ts=posted["ts"], text="step 2/3")

    contract.validate("chat.update", response.data)
    message = slack.state.find(CHANNEL, posted["ts"])
    assert message is not None and (message.text, message.edited) == ("step 2/3", True)


def test_chat_update_fails_cant_update_when_message_is_someone_elses(slack: Slack) -> None:
    ts = slack.state.seed_message(CHANNEL, "mine", user=ALICE)

    with pytest.raises(SlackApiError) as raised:
        slack.client().chat_update(channel=CHANNEL, ts=ts, text="hijacked")

    assert raised.value.response["error"] == "cant_update_message"


def test_reactions_add_fails_already_reacted_when_repeated(
    slack: Slack, contract: SlackContract
) -> None:
    client = slack.client()
    ts = slack.state.seed_message(CHANNEL, "deploy please", user=ALICE)
    first = client.reactions_add(channel=CHANNEL, timestamp=ts, name="eyes")

    with pytest.raises(SlackApiError) as raised:
        client.reactions_add(channel=CHANNEL, timestamp=ts, name="eyes")

    contract.validate("reactions.add", first.data)
    contract.validate("reactions.add", raised.value.response.data, status="default")
    assert raised.value.response["error"] == "already_reacted"
    message = slack.state.find(CHANNEL, ts)
    assert message is not None and message.reactions == {"eyes": [slack.state.bot_user_id]}


def test_users_info_returns_profile_when_user_is_known(slack: Slack) -> None:
    response = slack.client().users_info(user=ALICE)

    assert response["user"]["real_name"] == "Alice Example"
    assert response["user"]["is_bot"] is False


def test_users_info_fails_user_not_found_when_user_is_unknown(slack: Slack) -> None:
    with pytest.raises(SlackApiError) as raised:
        slack.client().users_info(user="U0NOBODY01")

    assert raised.value.response["error"] == "user_not_found"


async def test_async_client_posts_and_reads_when_using_async_web_client(slack: Slack) -> None:
    client = AsyncWebClient(token=TOKEN, base_url=f"{slack.url}/api/", retry_handlers=[])
    root = slack.state.seed_message(CHANNEL, "async hello", user=ALICE)

    posted = await client.chat_postMessage(channel=CHANNEL, text="async reply", thread_ts=root)
    replies = await client.conversations_replies(channel=CHANNEL, ts=root)

    assert [m["ts"] for m in replies["messages"]] == [root, posted["ts"]]


def test_rate_limited_429_with_retry_after_when_429_injected(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "429", retry_after=7)

    with pytest.raises(SlackApiError) as raised:
        slack.client().chat_postMessage(channel=CHANNEL, text="too fast")

    response = raised.value.response
    assert (response.status_code, response["error"]) == (429, "ratelimited")
    assert response.headers["Retry-After"] == "7"
    assert slack.state.messages == []


def test_message_posted_once_when_client_retries_after_retry_after(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "429", retry_after=1)
    client = slack.client(retry_handlers=[RateLimitErrorRetryHandler(max_retry_count=1)])
    started = time.monotonic()

    client.chat_postMessage(channel=CHANNEL, text="patient")

    assert time.monotonic() - started >= 1.0
    assert [m.text for m in slack.state.bot_posts()] == ["patient"]
    assert len(slack.state.requests_to("POST", "/api/chat.postMessage")) == 2


def test_write_lands_but_client_errors_when_response_dropped(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "drop_response")

    with pytest.raises(http.client.IncompleteRead):  # no answer at all, not an error answer
        slack.client().chat_postMessage(channel=CHANNEL, text="lost reply")

    assert [m.text for m in slack.state.bot_posts()] == ["lost reply"]


def test_server_error_500_when_500_injected(slack: Slack) -> None:
    slack.state.inject("*", "500")

    with pytest.raises(SlackApiError) as raised:
        slack.client().auth_test()

    assert raised.value.response.status_code == 500
    assert slack.client().auth_test()["ok"] is True  # times=1: the next call is served


def test_client_times_out_and_write_lands_late_when_timeout_injected(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "timeout", delay_s=0.6)

    with pytest.raises(TimeoutError):
        slack.client(timeout=0.2).chat_postMessage(channel=CHANNEL, text="slow")

    deadline = time.monotonic() + 3
    while not slack.state.bot_posts() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [m.text for m in slack.state.bot_posts()] == ["slow"]


def test_requests_recorded_without_authorization_when_called(slack: Slack) -> None:
    slack.client().chat_postMessage(channel=CHANNEL, text="recorded")

    recorded = slack.state.requests_to("POST", "/api/chat.postMessage")
    assert [r.body["text"] for r in recorded] == ["recorded"]
    assert "authorization" not in recorded[0].headers


def test_signed_event_verifies_with_slack_sdk_when_secret_matches() -> None:
    payload = load_slack_event("app_mention", **{"event.text": "<@W111> hello"})
    signed = sign_slack(payload, "s3cr3t")
    verifier = SignatureVerifier("s3cr3t")

    assert verifier.is_valid_request(signed.body, signed.headers)
    assert not SignatureVerifier("other").is_valid_request(signed.body, signed.headers)
    assert b"<@W111> hello" in signed.body


def test_signed_event_rejected_by_slack_sdk_when_timestamp_is_old() -> None:
    signed = sign_slack(load_slack_event("message"), "s3cr3t", timestamp=int(time.time()) - 600)

    assert not SignatureVerifier("s3cr3t").is_valid_request(signed.body, signed.headers)


async def test_deliver_posts_numbered_retries_when_slack_retries_requested() -> None:
    received: list[dict[str, str]] = []
    receiver = FastAPI()

    @receiver.post("/slack/events")
    async def events(request: Request) -> dict[str, bool]:
        received.append(dict(request.headers))
        return {"ok": True}

    signed = sign_slack(load_slack_event("app_mention"), "s3cr3t")
    with serve(receiver) as server:
        responses = await deliver(f"{server.url}/slack/events", signed, times=3, slack_retries=True)

    assert [r.status_code for r in responses] == [200, 200, 200]
    assert [h.get("x-slack-retry-num") for h in received] == [None, "1", "2"]
    assert all(SignatureVerifier("s3cr3t").is_valid_request(signed.body, h) for h in received)


async def test_deliver_sends_all_at_once_when_concurrently() -> None:
    in_flight, peak = 0, 0
    receiver = FastAPI()

    @receiver.post("/hook")
    async def hook() -> dict[str, bool]:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.1)
        in_flight -= 1
        return {"ok": True}

    with serve(receiver) as server:
        await deliver(f"{server.url}/hook", sign_slack(b"{}", "s"), times=5, concurrently=True)

    assert peak > 1


def test_contract_rejects_response_when_it_breaks_the_schema(contract: SlackContract) -> None:
    with pytest.raises(jsonschema.ValidationError):
        contract.validate("chat.postMessage", {"ok": True, "channel": CHANNEL, "ts": "1.2"})


# -- what the task brief reads ----------------------------------------------------------------


def _with_files(schema: dict[str, Any], contract: SlackContract) -> dict[str, Any]:
    """The 2021 reply schema leaves out ``files`` (and ``upload``) that file_share messages
    carry (see the corpus event message.file_share); allow exactly those, as Slack's files."""
    files = {"type": "array", "items": contract.definition("objs_file")}
    extra = {"files": files, "upload": {"type": "boolean"}}
    return {**schema, "properties": {**schema["properties"], **extra}}


def _with_paging(contract: SlackContract, method: str) -> dict[str, Any]:
    """The 2021 description leaves ``response_metadata`` out of conversations.replies, but
    Slack's own example of the method (its response example in the description) pages
    with it; allow exactly that, in the description's "new paging style"."""
    schema = contract.response_schema(method)
    paging = contract.definition("objs_response_metadata")["items"][0]
    return {**schema, "properties": {**schema["properties"], "response_metadata": paging}}


def test_conversations_replies_pages_with_cursor_when_thread_is_longer_than_limit(
    slack: Slack, contract: SlackContract
) -> None:
    root = slack.state.seed_message(CHANNEL, "root", user=ALICE)
    for n in range(6):
        slack.state.seed_message(CHANNEL, f"reply {n}", user=ALICE, thread_ts=root)
    client, texts, cursor, pages = slack.client(), [], None, 0
    while True:
        page = client.conversations_replies(channel=CHANNEL, ts=root, limit=3, cursor=cursor)
        contract.validate_schema(_with_paging(contract, "conversations.replies"), page.data)
        texts += [m["text"] for m in page["messages"]]
        pages += 1
        cursor = (page.get("response_metadata") or {}).get("next_cursor")
        if not page["has_more"]:
            break
    assert pages == 3 and texts == ["root"] + [f"reply {n}" for n in range(6)]


def test_conversations_replies_stops_at_latest_when_inclusive(slack: Slack) -> None:
    root = slack.state.seed_message(CHANNEL, "root", user=ALICE)
    asked = slack.state.seed_message(CHANNEL, "the request", user=ALICE, thread_ts=root)
    slack.state.seed_message(CHANNEL, "later", user=ALICE, thread_ts=root)

    page = slack.client().conversations_replies(
        channel=CHANNEL, ts=root, latest=asked, inclusive=True
    )

    assert [m["text"] for m in page["messages"]] == ["root", "the request"]


def test_shared_files_match_spec_and_download_only_with_the_token(
    slack: Slack, contract: SlackContract
) -> None:
    state = slack.state
    root = state.seed_message(CHANNEL, "root", user=ALICE)
    shared = state.new_file("trace.txt", "text/plain", b"KeyError: 'sku'\n", user=ALICE)
    state.seed_message(CHANNEL, "see trace", user=ALICE, thread_ts=root, files=[shared])

    replies = slack.client().conversations_replies(channel=CHANNEL, ts=root)
    info = slack.client().files_info(file=shared.file_id)

    reply_schema = contract.response_schema("conversations.replies")["properties"]["messages"][
        "items"
    ]["items"][1]
    contract.validate_schema(_with_files(reply_schema, contract), replies["messages"][1])
    contract.validate("files.info", info.data)
    url = replies["messages"][1]["files"][0]["url_private_download"]
    assert url == info["file"]["url_private_download"] and TOKEN not in url
    authorised = httpx.get(url, headers={"Authorization": f"Bearer {TOKEN}"})
    anonymous = httpx.get(url)
    assert (authorised.status_code, authorised.content) == (200, b"KeyError: 'sku'\n")
    assert anonymous.headers["content-type"].startswith("text/html")  # Slack's sign-in page


def test_conversations_info_and_permalink_match_spec_when_asked(
    slack: Slack, contract: SlackContract
) -> None:
    root = slack.state.seed_message(CHANNEL, "root", user=ALICE)
    reply = slack.state.seed_message(CHANNEL, "reply", user=ALICE, thread_ts=root)

    info = slack.client().conversations_info(channel=CHANNEL)
    link = slack.client().chat_getPermalink(channel=CHANNEL, message_ts=reply)

    contract.validate("conversations.info", info.data)
    channel_schema = contract.definition("objs_conversation")["items"][0]
    contract.validate_schema(channel_schema, info["channel"])
    contract.validate("chat.getPermalink", link.data)
    assert info["channel"]["name"] == "general"
    assert link["permalink"].endswith(f"?thread_ts={root}&cid={CHANNEL}")
    slack.state.add_im("D0KEELDM01", ALICE)
    im = slack.client().conversations_info(channel="D0KEELDM01")
    contract.validate_schema(contract.definition("objs_conversation")["items"][2], im["channel"])
    assert im["channel"]["is_im"] is True


def test_refused_method_answers_missing_scope_with_the_needed_scope(slack: Slack) -> None:
    slack.state.refuse("conversations.info", "missing_scope", needed="channels:read")

    with pytest.raises(SlackApiError) as raised:
        slack.client().conversations_info(channel=CHANNEL)

    assert raised.value.response["error"] == "missing_scope"
    assert raised.value.response["needed"] == "channels:read"
