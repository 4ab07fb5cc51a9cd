"""SlackSurface and GitHubSurface against the emulators, through real slack_sdk and PyGithub."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass

import pytest

from adapters.config import SlackConfig
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import serve
from adapters.emulators.slack import SlackState, create_slack_app
from adapters.github.client import GitHubClient
from adapters.github.surface import BODY_LIMIT, GitHubSurface, marker
from adapters.slack.surface import TEXT_LIMIT, SlackSurface, fetch_slack_identity, slack_client
from adapters.slack.workspaces import WebSessions
from runtime.errors import NotFound, Permanent, Retryable
from runtime.threads import GitHubCommit, GitHubIssue, SlackThread
from tests.factories import app_key_pair

SLACK_TOKEN = "xoxb-keel-emulated"
CHANNEL = "C0KEELGEN1"
ALICE = "U0ALICE001"
GITHUB_TOKEN = "ghp_keel_emulated"
REPO = "acme/widgets"


# -- Slack ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Slack:
    state: SlackState
    surface: SlackSurface
    thread_ref: SlackThread
    root_ts: str


@pytest.fixture
async def slack() -> AsyncIterator[Slack]:
    state = SlackState()
    state.add_user(ALICE, "alice")
    root_ts = state.seed_message(CHANNEL, "<@U0KEELBOT1> fix the build", user=ALICE)
    with serve(create_slack_app(state)) as server:
        config = SlackConfig(bot_token=SLACK_TOKEN, api_url=f"{server.url}/api/")
        client = slack_client(config, WebSessions(), timeout_s=5)
        identity = await fetch_slack_identity(client)
        thread_ref = SlackThread(state.team_id, CHANNEL, root_ts)
        yield Slack(state, SlackSurface.single(client, identity), thread_ref, root_ts)


async def test_identity_read_from_auth_test_when_fetched_at_startup(slack: Slack) -> None:
    state = slack.state
    client = await slack.surface.clients.client(state.team_id)
    identity = await fetch_slack_identity(client)
    expected = (state.team_id, state.bot_user_id, state.bot_id, state.app_id)
    assert (identity.team_id, identity.bot_user_id, identity.bot_id, identity.app_id) == expected


async def test_post_lands_in_thread_and_is_found_by_key_when_posted(slack: Slack) -> None:
    posted = await slack.surface.post(slack.thread_ref, "On it.", key="task-1:ack")

    [message] = slack.state.bot_posts(CHANNEL)
    assert posted == slack.thread_ref.message(message.ts)
    assert (message.thread_ts, message.text) == (slack.root_ts, "On it.")
    assert await slack.surface.find_post(slack.thread_ref, key="task-1:ack") == posted
    assert await slack.surface.find_post(slack.thread_ref, key="task-1:done") is None


async def test_one_post_found_when_response_was_dropped(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "drop_response")

    with pytest.raises(Retryable):
        await slack.surface.post(slack.thread_ref, "Done.", key="task-1:done")
    found = await slack.surface.find_post(slack.thread_ref, key="task-1:done")

    [message] = slack.state.bot_posts(CHANNEL)
    assert found == slack.thread_ref.message(message.ts)


async def test_rate_limit_surfaces_retry_after_then_posts_once_when_retried(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "429", retry_after=7)

    with pytest.raises(Retryable) as limited:
        await slack.surface.post(slack.thread_ref, "Done.", key="task-1:done")
    assert limited.value.retry_after_s == 7
    assert slack.state.bot_posts(CHANNEL) == []  # slack_sdk did not retry on its own

    await slack.surface.post(slack.thread_ref, "Done.", key="task-1:done")

    assert [m.text for m in slack.state.bot_posts(CHANNEL)] == ["Done."]
    assert len(slack.state.requests_to("POST", "/api/chat.postMessage")) == 2


async def test_text_replaced_and_key_kept_when_updated(slack: Slack) -> None:
    posted = await slack.surface.post(slack.thread_ref, "Working: 1/3", key="task-1:progress")

    await slack.surface.update(posted, "Working: 2/3")

    [message] = slack.state.bot_posts(CHANNEL)
    assert (message.text, message.edited) == ("Working: 2/3", True)
    assert await slack.surface.find_post(slack.thread_ref, key="task-1:progress") == posted


async def test_reaction_added_once_when_already_reacted(slack: Slack) -> None:
    await slack.surface.react(slack.thread_ref, ":eyes:")
    await slack.surface.react(slack.thread_ref, "eyes")

    root = slack.state.find(CHANNEL, slack.root_ts)
    assert root is not None and root.reactions == {"eyes": [slack.state.bot_user_id]}


async def test_reaction_lands_on_the_named_message_when_the_ref_names_one(slack: Slack) -> None:
    posted = await slack.surface.post(slack.thread_ref, "On it.", key="task-1:ack")

    await slack.surface.react(posted, "rocket")

    assert posted.message_ts is not None
    reply = slack.state.find(CHANNEL, posted.message_ts)
    root = slack.state.find(CHANNEL, slack.root_ts)
    assert reply is not None and reply.reactions == {"rocket": [slack.state.bot_user_id]}
    assert root is not None and root.reactions == {}


async def test_permanent_without_a_call_when_the_ref_is_not_a_slack_thread(slack: Slack) -> None:
    with pytest.raises(Permanent, match="not a Slack thread: github:acme/widgets#1"):
        await slack.surface.post(GitHubIssue(REPO, 1), "hi", key="k")
    with pytest.raises(Permanent, match="not a Slack post"):
        await slack.surface.update(slack.thread_ref, "no message named")
    assert slack.state.requests_to("POST", "/api/chat.postMessage") == []


async def test_long_text_truncated_with_notice_when_over_slack_limit(slack: Slack) -> None:
    await slack.surface.post(slack.thread_ref, "z" * (TEXT_LIMIT + 10), key="task-1:long")

    [message] = slack.state.bot_posts(CHANNEL)
    assert len(message.text) == TEXT_LIMIT
    assert message.text.endswith("… (truncated)")


async def test_permanent_when_channel_is_unknown(slack: Slack) -> None:
    with pytest.raises(Permanent, match="channel_not_found"):
        await slack.surface.post(
            SlackThread(slack.state.team_id, "C0NOWHERE1", slack.root_ts), "hi", key="k"
        )


async def test_permanent_when_token_is_revoked(slack: Slack) -> None:
    slack.state.tokens.clear()

    with pytest.raises(Permanent, match="invalid_auth"):
        await slack.surface.post(slack.thread_ref, "hi", key="k")


# -- GitHub -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GitHub:
    state: GitHubState
    url: str
    surface: GitHubSurface
    thread_ref: GitHubIssue


@pytest.fixture(scope="module")
def app_key() -> tuple[str, str]:
    return app_key_pair()


@pytest.fixture
async def github(app_key: tuple[str, str]) -> AsyncIterator[GitHub]:
    state = GitHubState(app_public_key=app_key[1])
    state.add_token(GITHUB_TOKEN, "keel-bot")
    state.add_repo(REPO)
    number = state.add_issue(REPO, "Build is red", "Please fix CI", user="alice")
    with serve(create_github_app(state)) as server:
        client = GitHubClient.with_token(server.url, GITHUB_TOKEN, timeout_s=5)
        yield GitHub(state, server.url, GitHubSurface(client), GitHubIssue(REPO, number))
        await client.close()


def _bodies(github: GitHub) -> list[str]:
    return [c.body for c in github.state.repos[REPO].comments.values()]


async def test_comment_carries_marker_and_is_found_by_key_when_posted(github: GitHub) -> None:
    posted = await github.surface.post(github.thread_ref, "On it.", key="task-1:ack")

    [comment_id] = github.state.repos[REPO].comments
    assert posted == GitHubIssue(REPO, 1, comment_id)
    assert str(posted) == f"github:{REPO}#1:{comment_id}"
    assert _bodies(github) == [f"On it.\n\n{marker('task-1:ack')}"]
    assert await github.surface.find_post(github.thread_ref, key="task-1:ack") == posted
    assert await github.surface.find_post(github.thread_ref, key="task-1") is None


async def test_one_comment_found_when_response_was_dropped(github: GitHub) -> None:
    github.state.inject("issues/create-comment", "drop_response")

    with pytest.raises(Retryable):
        await github.surface.post(github.thread_ref, "Done.", key="task-1:done")
    found = await github.surface.find_post(github.thread_ref, key="task-1:done")

    [comment_id] = github.state.repos[REPO].comments
    assert found == GitHubIssue(REPO, 1, comment_id)
    assert github.state.comments_created(REPO) == 1


async def test_body_replaced_and_marker_kept_when_updated(github: GitHub) -> None:
    posted = await github.surface.post(github.thread_ref, "Working: 1/3", key="task-1:progress")

    await github.surface.update(posted, "Working: 2/3")

    assert _bodies(github) == [f"Working: 2/3\n\n{marker('task-1:progress')}"]
    assert await github.surface.find_post(github.thread_ref, key="task-1:progress") == posted


async def test_reactions_land_on_issue_and_comment_when_reacted(github: GitHub) -> None:
    comment_id = github.state.add_comment(REPO, 1, "@keel help", user="alice")

    await github.surface.react(github.thread_ref, ":eyes:")
    await github.surface.react(github.thread_ref.comment(comment_id), "rocket")
    await github.surface.react(github.thread_ref.comment(comment_id), "rocket")

    reactions = github.state.repos[REPO].reactions
    assert sorted((r.subject, r.content) for r in reactions) == [
        (("comment", comment_id), "rocket"),
        (("issue", 1), "eyes"),
    ]


async def test_reaction_retryable_when_github_errors_limits_or_drops_the_answer(
    github: GitHub,
) -> None:
    github.state.inject("reactions/create-for-issue", "500")
    with pytest.raises(Retryable):
        await github.surface.react(github.thread_ref, "eyes")
    github.state.inject("reactions/create-for-issue", "429", retry_after=7)
    with pytest.raises(Retryable) as limited:
        await github.surface.react(github.thread_ref, "eyes")
    assert limited.value.retry_after_s == 7
    github.state.inject("reactions/create-for-issue", "drop_response")
    with pytest.raises(Retryable, match="outcome unknown"):
        await github.surface.react(github.thread_ref, "eyes")

    await github.surface.react(github.thread_ref, "eyes")  # landed once, as a reaction does
    assert [r.content for r in github.state.repos[REPO].reactions] == ["eyes"]


async def test_reaction_not_found_when_neither_comment_nor_issue_exists(github: GitHub) -> None:
    with pytest.raises(NotFound):
        await github.surface.react(github.thread_ref.comment(424242), "eyes")
    with pytest.raises(NotFound):
        await github.surface.react(GitHubIssue(REPO, 99), "eyes")
    paths = [r.path for r in github.state.requests if r.method == "POST"]
    assert paths == [
        f"/repos/{REPO}/issues/comments/424242/reactions",
        f"/repos/{REPO}/pulls/comments/424242/reactions",  # a review comment, perhaps
        f"/repos/{REPO}/issues/99/reactions",
    ]


async def test_long_body_truncated_with_marker_kept_when_over_github_limit(
    github: GitHub,
) -> None:
    await github.surface.post(github.thread_ref, "z" * BODY_LIMIT, key="task-1:long")

    [body] = _bodies(github)
    assert len(body) == BODY_LIMIT
    assert "… (truncated)" in body and body.endswith(marker("task-1:long"))


async def test_marker_cannot_end_the_html_comment_when_key_has_dashes() -> None:
    assert "-->" not in marker("a-->b")[: -len(" -->")]


async def test_permanent_when_token_is_refused(github: GitHub) -> None:
    github.state.expire_token(GITHUB_TOKEN)

    with pytest.raises(Permanent, match="401"):
        await github.surface.post(github.thread_ref, "hi", key="k")
    assert github.state.comments_created(REPO) == 0


async def test_reaction_permanent_when_token_is_refused(github: GitHub) -> None:
    github.state.expire_token(GITHUB_TOKEN)

    with pytest.raises(Permanent, match="401"):
        await github.surface.react(github.thread_ref, "eyes")
    assert github.state.repos[REPO].reactions == []


async def test_installation_token_refreshed_once_when_github_refuses_a_reaction(
    github: GitHub, app_key: tuple[str, str]
) -> None:
    client = GitHubClient.as_installation(
        github.url, github.state.app_id, app_key[0], github.state.installation_id, timeout_s=5
    )
    await client.react(github.thread_ref, "eyes")
    github.state.expire_token()
    await client.react(github.thread_ref, "rocket")
    await client.close()

    token_path = f"/app/installations/{github.state.installation_id}/access_tokens"
    assert len(github.state.requests_to("POST", token_path)) == 2
    assert [r.content for r in github.state.repos[REPO].reactions] == ["eyes", "rocket"]


async def test_installation_token_refreshed_once_when_github_refuses_it(
    github: GitHub, app_key: tuple[str, str]
) -> None:
    client = GitHubClient.as_installation(
        github.url, github.state.app_id, app_key[0], github.state.installation_id, timeout_s=5
    )
    surface = GitHubSurface(client)
    await surface.post(github.thread_ref, "first", key="k1")

    github.state.expire_token()
    await surface.post(github.thread_ref, "second", key="k2")

    token_path = f"/app/installations/{github.state.installation_id}/access_tokens"
    assert len(github.state.requests_to("POST", token_path)) == 2
    authors = [c.user.login for c in github.state.repos[REPO].comments.values()]
    assert authors == ["keel[bot]", "keel[bot]"]
    assert github.state.comments_created(REPO) == 2


async def test_slack_retryable_when_server_errors(slack: Slack) -> None:
    slack.state.inject("chat.postMessage", "500")

    with pytest.raises(Retryable):
        await slack.surface.post(slack.thread_ref, "hi", key="k")


async def test_github_retryable_when_server_errors(github: GitHub) -> None:
    github.state.inject("issues/create-comment", "500")

    with pytest.raises(Retryable):
        await github.surface.post(github.thread_ref, "hi", key="k")
    assert github.state.comments_created(REPO) == 0


async def test_github_not_found_when_issue_is_missing(github: GitHub) -> None:
    with pytest.raises(NotFound):
        await github.surface.post(GitHubIssue(REPO, 99), "hi", key="k")


async def test_permanent_without_a_call_when_the_ref_is_a_commit(github: GitHub) -> None:
    with pytest.raises(Permanent, match="not a GitHub issue or pull request thread"):
        await github.surface.post(GitHubCommit(REPO, "a" * 40), "hi", key="k")
    with pytest.raises(Permanent, match="not a GitHub comment"):
        await github.surface.update(github.thread_ref, "no comment named")
    assert github.state.comments_created(REPO) == 0
