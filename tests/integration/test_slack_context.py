"""The Slack side of the brief against the Slack emulator over real HTTP: files listed by id
only, files that are not worth downloading, a refused download, direct messages."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from slack_sdk.web.async_client import AsyncWebClient

from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.slack.context import SlackContext, SlackReaders
from adapters.slack.files import MAX_DOWNLOADS, SlackFiles
from adapters.slack.signals import SlackIdentity
from adapters.slack.workspaces import WebSessions
from runtime.brief.model import Gathered, Origin
from runtime.config import ContextConfig
from runtime.threads import SlackThread

TOKEN = "xoxb-keel-emulated"
CHANNEL = "C0KEELGEN1"
ALICE = "U0ALICE001"
IDENTITY = SlackIdentity("T0KEEL0001", "U0KEELBOT1", "B0KEELBOT1", "A0KEELAPP1")


@pytest.fixture
def slack() -> Iterator[tuple[SlackState, str]]:
    state = SlackState()
    state.add_user(ALICE, "Alice")
    with serve(create_slack_app(state)) as server:
        yield state, f"{server.url}/api/"


def _gather(
    api: str, root: str, asked: str, *, token: str = TOKEN, channel: str = CHANNEL
) -> Gathered:
    settings = ContextConfig(max_file_bytes=100)
    client = AsyncWebClient(token=TOKEN, base_url=api, retry_handlers=[])
    context = SlackContext(client, IDENTITY, SlackFiles(token, api, settings), settings)
    thread = SlackThread(IDENTITY.team_id, channel, root)
    origin = Origin(
        task_id="t1",
        text="please look",
        provider="slack",
        kind="mention",
        thread=thread,
        message=thread.message(asked),
        actor_id=ALICE,
    )
    return asyncio.run(context.gather(origin, thread))


def test_file_listed_by_id_only_is_read_through_files_info(
    slack: tuple[SlackState, str],
) -> None:
    state, api = slack
    hidden = state.new_file("log.txt", "text/plain", b"boom\n", user=ALICE, check_file_info=True)
    root = state.seed_message(CHANNEL, "see the log", user=ALICE, files=[hidden])

    found = _gather(api, root, root)

    [download] = found.downloads
    assert (download.file.name, download.content) == ("log.txt", b"boom\n")
    assert len(state.requests_to("GET", "/api/files.info")) + len(
        state.requests_to("POST", "/api/files.info")
    ) == 1


def test_only_text_and_images_within_bounds_are_downloaded(slack: tuple[SlackState, str]) -> None:
    state, api = slack
    files = [
        state.new_file("bundle.zip", "application/zip", b"PK", user=ALICE),
        state.new_file("huge.log", "text/plain", b"x" * 101, user=ALICE),
        *(state.new_file(f"n{n}.txt", "text/plain", b"ok", user=ALICE) for n in range(11)),
    ]
    root = state.seed_message(CHANNEL, "files", user=ALICE, files=files)

    found = _gather(api, root, root)

    notes = {d.file.name: d.note for d in found.downloads}
    assert notes["bundle.zip"] == "not downloaded: neither a text file nor an image"
    assert notes["huge.log"] == "not downloaded: larger than 100 bytes"
    fetched = [d for d in found.downloads if d.content is not None]
    assert len(fetched) == MAX_DOWNLOADS and notes["n10.txt"] == "not downloaded: only 10 files are"
    assert len([r for r in state.requests if "/download/" in r.path]) == MAX_DOWNLOADS


def test_download_refused_with_a_sign_in_page_is_named(slack: tuple[SlackState, str]) -> None:
    state, api = slack
    shared = state.new_file("trace.txt", "text/plain", b"KeyError", user=ALICE)
    root = state.seed_message(CHANNEL, "trace", user=ALICE, files=[shared])

    found = _gather(api, root, root, token="xoxb-without-files-read")

    [download] = found.downloads
    assert download.content is None
    assert download.note == (
        "not downloaded: Slack answered with a sign-in page: the app needs the files:read scope"
    )


def test_direct_message_is_named_as_one(slack: tuple[SlackState, str]) -> None:
    state, api = slack
    state.add_im("D0KEELDM01", ALICE)
    root = state.seed_message("D0KEELDM01", "help", user=ALICE)

    found = _gather(api, root, root, channel="D0KEELDM01")

    assert ("Came from", "Slack, a direct message") in found.facts
    assert [p.text for s in found.sections for p in s.posts] == ["help"]


class TwoWorkspaces:
    """Our own ``SlackClients`` port: each workspace's client carries that workspace's token."""

    def __init__(self, api: str, tokens: dict[str, str]) -> None:
        self.api = api
        self.tokens = tokens

    async def client(self, team_id: str) -> AsyncWebClient:
        return AsyncWebClient(token=self.tokens[team_id], base_url=self.api, retry_handlers=[])

    async def identity(self, team_id: str | None) -> SlackIdentity | None:
        if team_id not in self.tokens:
            return None
        return SlackIdentity(team_id, "U0KEELBOT1", "B0KEELBOT1", "A0KEELAPP1")


def test_each_workspace_thread_is_read_with_that_workspace_token(
    slack: tuple[SlackState, str],
) -> None:
    state, api = slack
    other_team, other_channel, other_token = "T0TEAMB002", "C0TEAMBGEN", "xoxb-team-b"
    state.add_channel(other_channel, "b-general", team_id=other_team)
    state.add_token(other_token, other_team)
    roots = {
        IDENTITY.team_id: state.seed_message(CHANNEL, "A: cart is broken", user=ALICE),
        other_team: state.seed_message(other_channel, "B: login is broken", user=ALICE),
    }
    readers = SlackReaders(
        TwoWorkspaces(api, {IDENTITY.team_id: TOKEN, other_team: other_token}),
        WebSessions(),
        api,
        ContextConfig(),
    )

    async def read(team: str, channel: str) -> Gathered:
        reader = await readers.for_team(team)
        assert reader is not None
        thread = SlackThread(team, channel, roots[team])
        origin = Origin(
            task_id="t1", text="please look", provider="slack", kind="mention", thread=thread,
            message=thread.message(roots[team]), actor_id=ALICE,
        )
        return await reader.gather(origin, thread)

    found_b = asyncio.run(read(other_team, other_channel))
    found_a = asyncio.run(read(IDENTITY.team_id, CHANNEL))
    assert found_b.missing == () and found_a.missing == ()
    assert "login is broken" in found_b.sections[0].posts[0].text
    assert "cart is broken" in found_a.sections[0].posts[0].text
    replies = [token for method, token in state.token_uses if method == "conversations.replies"]
    assert set(replies) == {TOKEN, other_token}
    assert asyncio.run(readers.for_team("T0NOTHERE0")) is None
