"""Provider payloads → Signals, walked over every real example in the payload corpus.

Each Slack event and GitHub webhook example becomes the expected Signal kind or an Ignored
with a reason from the closed set; none raises. Hand-edited copies of corpus payloads cover
the cases the corpus does not show (our own bot, commands, links).
"""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.emulators.corpus import corpora_root
from adapters.github.signals import GitHubIdentity, signal_from_github
from adapters.slack.signals import SlackIdentity, signal_from_slack_event
from routing.signal import (
    DROP_REASONS,
    SIGNAL_KINDS,
    CiRun,
    Ignored,
    Signal,
    find_links,
    parse_command,
)
from runtime.threads import GitHubCommit, GitHubIssue, SlackThread, parse_thread

CORPORA = corpora_root()
SLACK_EVENTS = CORPORA / "slack" / "events"
GITHUB_WEBHOOKS = CORPORA / "github" / "webhooks"
NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)

# In the bolt corpus W111 is the installed bot user (its `authorizations` entry is_bot) and
# A111 the receiving app; "other-app" (bot B999, app A222) is somebody else's bot.
SLACK_US = SlackIdentity(team_id="T111", bot_user_id="W111", bot_id="B111", app_id="A111")
GITHUB_US = GitHubIdentity(bot_login="keel", app_id=4242)

Expected = tuple[str, str]  # ("signal", kind) or ("ignored", reason)


def kind(signal_kind: str) -> Expected:
    return ("signal", signal_kind)


def dropped(reason: str) -> Expected:
    return ("ignored", reason)


SLACK_EXPECTED: dict[str, Expected] = {
    "app_mention.json": kind("mention"),
    "app_mention.shared-channel.json": kind("mention"),
    "app_uninstalled.json": dropped("unsupported"),
    "member_joined_channel.json": dropped("unsupported"),
    "message.bot_message.json": dropped("not_addressed"),
    "message.bot_message.response_url.json": dropped("not_addressed"),
    "message.file_share.json": dropped("not_addressed"),
    "message.from-bot-user.json": dropped("not_addressed"),
    "message.in-thread.channel.json": kind("thread_reply"),
    "message.in-thread.im.json": kind("thread_reply"),
    "message.json": kind("message"),  # posted by W111, i.e. by us: the router drops it
    "message.message_changed.json": dropped("edited"),
    "message.message_changed.anonymised-capture.json": dropped("edited"),
    "message.message_changed.by-bot.anonymised-capture.json": dropped("edited"),
    "message.message_changed.in-thread.channel.json": dropped("edited"),
    "message.thread_broadcast.json": kind("thread_reply"),
    "reaction_added.json": kind("reaction"),
    "reaction_added.slack-events-api.json": dropped("unsupported"),  # 2016 capture: no event_id
    "tokens_revoked.json": dropped("unsupported"),
    "url_verification.json": dropped("unsupported"),
    "url_verification.slack-events-api.json": dropped("unsupported"),
    # java-slack-sdk's all-fields examples blank every string, the envelope type included.
    "all-fields/app_mention.json": dropped("unsupported"),
    "all-fields/message.json": dropped("unsupported"),
    "all-fields/message.bot_message.json": dropped("unsupported"),
    "all-fields/message.message_changed.json": dropped("unsupported"),
    "all-fields/message.message_deleted.json": dropped("unsupported"),
    "all-fields/message.message_replied.json": dropped("unsupported"),
    "all-fields/message.thread_broadcast.json": dropped("unsupported"),
    "all-fields/reaction_added.json": dropped("unsupported"),
}

# The all-fields examples with their identifying fields given values, so the translation of
# every other field is exercised rather than stopping at the blank envelope.
SLACK_FILLED_EXPECTED: dict[str, Expected] = {
    "all-fields/app_mention.json": kind("mention"),
    "all-fields/message.json": dropped("not_addressed"),
    "all-fields/message.bot_message.json": dropped("unsupported"),  # blank bot_id: no author
    "all-fields/message.message_changed.json": dropped("edited"),
    "all-fields/message.message_deleted.json": dropped("unsupported"),
    "all-fields/message.message_replied.json": dropped("unsupported"),
    "all-fields/message.thread_broadcast.json": dropped("not_addressed"),  # blank thread_ts
    "all-fields/reaction_added.json": kind("reaction"),
}
_FILL = {
    "type": "event_callback",
    "event_id": "Ev900",
    "team_id": "T900",
    "channel": "C900",
    "ts": "1700000000.000100",
    "user": "U900",
    "reaction": "octagonal_sign",
}

# (event, action): every other action of every event is acknowledged as unsupported.
GITHUB_EXPECTED: dict[tuple[str, str | None], Expected] = {
    ("issue_comment", "created"): kind("issue_comment"),
    ("issue_comment", "edited"): dropped("edited"),
    ("issue_comment", "deleted"): dropped("unsupported"),
    ("issues", "opened"): kind("issue_opened"),
    ("issues", "edited"): dropped("edited"),
    # Requests only when they name the bot (assignee) or the configured trigger label.
    ("issues", "assigned"): dropped("not_addressed"),
    ("issues", "labeled"): dropped("not_addressed"),
    ("pull_request", "opened"): kind("pr_opened"),
    # Review requests only when review.auto names the repository, or the bot is the reviewer.
    ("pull_request", "synchronize"): dropped("not_addressed"),
    ("pull_request", "ready_for_review"): dropped("not_addressed"),
    ("pull_request", "review_requested"): dropped("not_addressed"),
    ("pull_request_review_comment", "created"): kind("review_comment"),
    ("pull_request_review_comment", "edited"): dropped("edited"),
    ("pull_request_review_comment", "deleted"): dropped("unsupported"),
    ("pull_request_review", "submitted"): dropped("not_addressed"),  # its body is empty
    ("check_run", "completed"): kind("ci_result"),
    ("check_run", "created"): dropped("unsupported"),
    ("check_suite", "completed"): kind("ci_result"),
    ("check_suite", "requested"): dropped("unsupported"),
    ("workflow_run", "completed"): kind("ci_result"),
    ("workflow_run", "requested"): dropped("unsupported"),
    ("ping", None): dropped("unsupported"),
    ("installation", "created"): dropped("unsupported"),
    ("installation", "deleted"): dropped("unsupported"),
    ("installation_repositories", "added"): dropped("unsupported"),
}



def _corpus_files(folder: Path) -> list[Path]:
    return sorted(folder.rglob("*.json"))


def _file_id(path: Path, folder: Path) -> str:
    return path.relative_to(folder).as_posix()


def _as_envelope(payload: dict[str, Any]) -> dict[str, Any]:
    """Bare events (no envelope) are wrapped the way the Events API delivers them."""
    if "event" in payload or payload.get("type") == "url_verification":
        return payload
    return {"type": "event_callback", "team_id": "T111", "event_id": "Ev999", "event": payload}


def _slack(name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((SLACK_EVENTS / name).read_text())
    return _as_envelope(payload)


def _github(event: str, name: str) -> dict[str, Any]:
    payload: dict[str, Any] = json.loads((GITHUB_WEBHOOKS / event / name).read_text())
    return payload


def _filled(envelope: dict[str, Any]) -> dict[str, Any]:
    filled = copy.deepcopy(envelope)
    event = filled["event"]
    for part in (filled, event, event.get("item", {})):
        for key, value in _FILL.items():
            if part.get(key) == "" and not (part is event and key == "type"):
                part[key] = value
    return filled


def _outcome(result: Signal | Ignored) -> Expected:
    if isinstance(result, Ignored):
        return ("ignored", result.reason)
    return ("signal", result.kind)


def _assert_well_formed(result: Signal | Ignored, provider: str) -> None:
    if isinstance(result, Ignored):
        assert result.reason in DROP_REASONS
        assert result.detail
        return
    assert result.provider == provider
    assert result.kind in SIGNAL_KINDS
    thread = result.thread_ref
    # A whole conversation on the provider's own surface, that reads back as itself.
    assert (thread.surface, thread.root) == (provider, thread)
    assert parse_thread(str(thread)) == thread
    assert result.objective_key == str(thread)
    assert result.dedupe_key.startswith(f"{provider}:")
    assert result.delivery_id
    assert result.received_at == NOW
    assert result.actor.id and result.actor.permission is None


def _slack_signal(envelope: dict[str, Any], identity: SlackIdentity = SLACK_US) -> Signal:
    result = signal_from_slack_event(envelope, identity, received_at=NOW)
    assert isinstance(result, Signal), result
    return result


def _github_signal(
    event: str, payload: dict[str, Any], delivery_id: str = "d-1", **kwargs: Any
) -> Signal:
    result = signal_from_github(event, delivery_id, payload, GITHUB_US, received_at=NOW, **kwargs)
    assert isinstance(result, Signal), result
    return result


# -- the corpus walk ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    _corpus_files(SLACK_EVENTS),
    ids=lambda path: _file_id(path, SLACK_EVENTS),
)
def test_slack_example_becomes_expected_outcome_when_translated(path: Path) -> None:
    name = _file_id(path, SLACK_EVENTS)
    result = signal_from_slack_event(_slack(name), SLACK_US, received_at=NOW)
    _assert_well_formed(result, "slack")
    if name in SLACK_EXPECTED:
        assert _outcome(result) == SLACK_EXPECTED[name], result


@pytest.mark.parametrize("name", sorted(SLACK_FILLED_EXPECTED), ids=str)
def test_slack_all_fields_example_is_translated_when_its_ids_are_filled(name: str) -> None:
    result = signal_from_slack_event(_filled(_slack(name)), SLACK_US, received_at=NOW)
    _assert_well_formed(result, "slack")
    assert _outcome(result) == SLACK_FILLED_EXPECTED[name], result


@pytest.mark.parametrize(
    "path",
    _corpus_files(GITHUB_WEBHOOKS),
    ids=lambda path: _file_id(path, GITHUB_WEBHOOKS),
)
def test_github_example_becomes_expected_outcome_when_translated(path: Path) -> None:
    event = path.parent.name
    payload = json.loads(path.read_text())
    result = signal_from_github(event, "guid-1", payload, GITHUB_US, received_at=NOW)
    _assert_well_formed(result, "github")
    expected = GITHUB_EXPECTED.get((event, payload.get("action")), dropped("unsupported"))
    assert _outcome(result) == expected, result


def test_expectation_tables_name_only_files_in_the_corpus_when_walked() -> None:
    slack_names = {_file_id(path, SLACK_EVENTS) for path in _corpus_files(SLACK_EVENTS)}
    github_pairs = {
        (path.parent.name, json.loads(path.read_text()).get("action"))
        for path in _corpus_files(GITHUB_WEBHOOKS)
    }
    assert set(SLACK_EXPECTED) <= slack_names
    assert set(GITHUB_EXPECTED) <= github_pairs


# -- Slack specifics ------------------------------------------------------------------------


def test_dedupe_key_collides_when_app_mention_and_message_share_a_ts() -> None:
    mention = _slack("app_mention.json")
    message = copy.deepcopy(mention)
    message["event_id"] = "Ev112"
    message["event"]["type"] = "message"
    first, second = _slack_signal(mention), _slack_signal(message)
    assert first.delivery_id != second.delivery_id
    assert first.dedupe_key == second.dedupe_key == "slack:T111:C111:1595926230.009600"
    assert first.thread_ref == second.thread_ref


def test_dedupe_key_collides_when_slack_resends_under_a_new_event_id() -> None:
    original = _slack("message.in-thread.channel.json")
    resent = copy.deepcopy(original)
    resent["event_id"] = "Ev777"
    assert _slack_signal(original).dedupe_key == _slack_signal(resent).dedupe_key


def test_thread_reply_names_the_root_and_itself_when_message_is_in_a_thread() -> None:
    signal = _slack_signal(_slack("message.in-thread.channel.json"))
    # The thread is the objective; the message is the reply itself (the 👀 goes there).
    assert signal.thread_ref == SlackThread("T111", "C111", "1726133698.626339")
    assert signal.message == signal.thread_ref.message("1726133700.887259")
    assert signal.dedupe_key == "slack:T111:C111:1726133700.887259"
    assert not signal.addresses_bot


@pytest.mark.parametrize(
    "identity",
    [
        SlackIdentity(team_id="T111", bot_user_id="W111", bot_id="B999", app_id="A111"),
        SlackIdentity(team_id="T111", bot_user_id="W111", bot_id="B111", app_id="A222"),
        SlackIdentity(team_id="T111", bot_user_id="UB111", bot_id="B111", app_id="A111"),
    ],
    ids=["bot_id", "bot_profile.app_id", "bot_user"],
)
def test_actor_is_self_when_message_is_ours(identity: SlackIdentity) -> None:
    envelope = _slack("message.from-bot-user.json")
    signal = _slack_signal(envelope, identity)
    assert signal.actor.is_self and signal.actor.is_bot
    assert signal.kind == "message"


def test_actor_is_another_bot_when_bot_id_is_not_ours() -> None:
    envelope = _slack("message.from-bot-user.json")
    envelope["event"]["thread_ts"] = "1610261000.000100"
    signal = _slack_signal(envelope)
    assert signal.actor == signal.actor.__class__("UB111", "other-app", True, False)
    assert signal.kind == "thread_reply"


def test_self_edit_is_dropped_as_edited_when_our_bot_changes_a_message() -> None:
    result = signal_from_slack_event(
        _slack("message.message_changed.by-bot.anonymised-capture.json"),
        SlackIdentity(team_id="T1", bot_user_id="U1", bot_id="BXXXXXXXXXX", app_id="A1"),
        received_at=NOW,
    )
    assert result == Ignored("edited", "message_changed")


@pytest.mark.parametrize(
    ("text", "command"),
    [
        ("<@W111> stop", "stop"),
        ("<@W111> Cancel!", "stop"),
        ("<@W111|keel>  STOP. ", "stop"),
        ("<@W111> :octagonal_sign:", "stop"),
        ("<@W111> status?", "status"),
        ("<@W111> stop using the cache", None),
        ("<@W111> what is the status", None),
        ("<@W111> fix the flaky test", None),
    ],
)
def test_command_is_detected_when_mention_text_is_a_stop_or_status_word(
    text: str, command: str | None
) -> None:
    envelope = _slack("app_mention.json")
    envelope["event"]["text"] = text
    assert _slack_signal(envelope).command == command


def test_text_loses_the_leading_mention_when_bot_is_mentioned_first() -> None:
    envelope = _slack("app_mention.json")
    envelope["event"]["text"] = "<@W111> see <https://example.com/a|this> and https://x.test/b."
    signal = _slack_signal(envelope)
    assert signal.text == "see <https://example.com/a|this> and https://x.test/b."
    assert signal.links == ("https://example.com/a", "https://x.test/b")


def test_top_level_message_is_a_mention_when_it_mentions_the_bot() -> None:
    envelope = _slack("message.file_share.json")
    envelope["event"]["text"] = "<@W111> what is in this file?"
    signal = _slack_signal(envelope)
    assert (signal.kind, signal.addresses_bot) == ("mention", True)


def test_top_level_message_addresses_the_bot_when_it_is_a_direct_message() -> None:
    envelope = _slack("message.in-thread.im.json")
    del envelope["event"]["thread_ts"]
    signal = _slack_signal(envelope)
    assert (signal.kind, signal.addresses_bot) == ("message", True)


def test_thread_reply_addresses_the_bot_when_it_mentions_the_bot() -> None:
    envelope = _slack("message.in-thread.channel.json")
    envelope["event"]["text"] = "thanks <@W111>, also check the docs"
    signal = _slack_signal(envelope)
    assert (signal.kind, signal.addresses_bot, signal.command) == ("thread_reply", True, None)


def test_reaction_is_a_stop_command_when_it_is_octagonal_sign() -> None:
    envelope = _slack("reaction_added.json")
    envelope["event"]["reaction"] = "octagonal_sign"
    envelope["event"]["user"] = "W222"
    signal = _slack_signal(envelope)
    assert (signal.kind, signal.command, signal.addresses_bot) == ("reaction", "stop", True)
    assert signal.thread_ref == SlackThread("T111", "C111", "1599529504.000400")
    assert signal.reaction == "octagonal_sign"
    assert not signal.actor.is_self


def test_reaction_is_ours_and_not_a_command_when_bot_user_adds_heart_eyes() -> None:
    signal = _slack_signal(_slack("reaction_added.json"))
    assert signal.actor.is_self
    assert (signal.command, signal.addresses_bot) == (None, False)
    assert signal.dedupe_key != "slack:T111:C111:1599529504.000400"


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("event", "ts"), 1595926230.0096),
        (("event", "channel"), None),
        (("event",), "not an event"),
        (("event_id",), ""),
    ],
    ids=["ts-number", "channel-null", "event-string", "event_id-blank"],
)
def test_slack_payload_is_unsupported_when_a_field_is_malformed(
    path: tuple[str, ...], value: Any
) -> None:
    envelope = _slack("app_mention.json")
    target = envelope
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    result = signal_from_slack_event(envelope, SLACK_US, received_at=NOW)
    assert isinstance(result, Ignored) and result.reason == "unsupported"
    assert path[-1] in result.detail


# -- GitHub specifics -----------------------------------------------------------------------


def test_issue_comment_addresses_the_bot_when_body_names_the_trigger() -> None:
    payload = _github("issue_comment", "created.json")
    payload["comment"]["body"] = "@Keel please fix the typo, see https://example.com/readme."
    signal = _github_signal("issue_comment", payload)
    assert signal.addresses_bot
    assert signal.text == "please fix the typo, see https://example.com/readme."
    assert signal.links == ("https://example.com/readme",)
    assert signal.thread_ref == GitHubIssue("Codertocat/Hello-World", 1)
    assert signal.objective_key == "github:Codertocat/Hello-World#1"
    assert signal.repo == "Codertocat/Hello-World"


@pytest.mark.parametrize("body", ["@keeler look", "mail me at ops@keel.dev", "keel, look"])
def test_issue_comment_is_not_addressed_when_trigger_is_only_part_of_a_word(body: str) -> None:
    payload = _github("issue_comment", "created.json")
    payload["comment"]["body"] = body
    assert not _github_signal("issue_comment", payload).addresses_bot


@pytest.mark.parametrize(("body", "command"), [("@keel stop", "stop"), ("@keel status", "status")])
def test_issue_comment_carries_a_command_when_body_is_trigger_and_word(
    body: str, command: str
) -> None:
    payload = _github("issue_comment", "created.json")
    payload["comment"]["body"] = body
    assert _github_signal("issue_comment", payload).command == command


def test_dedupe_key_is_comment_and_action_when_one_comment_arrives_twice() -> None:
    payload = _github("issue_comment", "created.json")
    first = _github_signal("issue_comment", payload, delivery_id="guid-a")
    again = _github_signal("issue_comment", payload, delivery_id="guid-b")
    assert first.dedupe_key == again.dedupe_key == "github:492700400:created"
    assert (first.delivery_id, again.delivery_id) == ("guid-a", "guid-b")


def test_issue_comment_names_event_and_issue_labels_when_created() -> None:
    payload = _github("issue_comment", "created.json")
    payload["issue"]["labels"] = [{"name": "bug"}, {"name": "docs"}]
    signal = _github_signal("issue_comment", payload)
    assert (signal.event, signal.event_action) == ("issue_comment", "created")
    assert signal.labels == ("bug", "docs")
    assert (signal.branch, signal.ci, signal.reaction) == (None, None, None)


@pytest.mark.parametrize(
    ("login", "sender_type"), [("keel[bot]", "Bot"), ("KEEL", "User"), ("keel", "Bot")]
)
def test_actor_is_self_when_sender_is_our_login(login: str, sender_type: str) -> None:
    payload = _github("issue_comment", "created.json")
    payload["sender"].update(login=login, type=sender_type)
    assert _github_signal("issue_comment", payload).actor.is_self


def test_actor_is_another_bot_when_sender_is_a_different_app() -> None:
    payload = _github("issue_comment", "created.json")
    payload["sender"].update(login="keel-lint[bot]", type="Bot")
    actor = _github_signal("issue_comment", payload).actor
    assert (actor.is_bot, actor.is_self) == (True, False)


def test_actor_is_self_when_comment_was_performed_via_our_app() -> None:
    payload = _github("issue_comment", "created.json")
    payload["comment"]["performed_via_github_app"] = {"id": 4242, "name": "Keel"}
    assert _github_signal("issue_comment", payload).actor.is_self


def test_issue_opened_addresses_the_bot_when_title_names_the_trigger() -> None:
    payload = _github("issues", "opened.with-empty-body.json")
    payload["issue"]["title"] = "@keel the build is red"
    signal = _github_signal("issues", payload)
    assert (signal.kind, signal.addresses_bot) == ("issue_opened", True)
    assert signal.dedupe_key == "github:delivery:d-1"


def test_ci_result_names_conclusion_sha_branch_and_app_when_check_run_completes() -> None:
    signal = _github_signal("check_run", _github("check_run", "completed.json"))
    sha = "ec26c3e57ca3a959ca5aad62de7213c562f8c821"
    assert signal.thread_ref == GitHubCommit("Codertocat/Hello-World", sha)
    assert signal.ci == CiRun("Octocoders-linter", "success", app_id=29310)
    assert (signal.event, signal.branch) == ("check_run", "changes")
    assert not signal.addresses_bot


def test_ci_result_names_the_workflow_when_workflow_run_completes() -> None:
    signal = _github_signal("workflow_run", _github("workflow_run", "completed.json"))
    assert signal.branch == "master"
    assert signal.ci is not None and signal.ci.conclusion == "success"
    assert signal.repo == "octo-org/octo-repo"


def test_pr_opened_names_head_branch_and_labels_when_opened() -> None:
    payload = _github("pull_request", "opened.json")
    payload["pull_request"]["labels"] = [{"name": "deps"}]
    signal = _github_signal("pull_request", payload)
    assert signal.thread_ref == GitHubIssue(payload["repository"]["full_name"], payload["number"])
    assert (signal.branch, signal.labels) == (payload["pull_request"]["head"]["ref"], ("deps",))


def test_github_payload_is_unsupported_when_a_required_field_is_missing() -> None:
    payload = _github("issue_comment", "created.json")
    del payload["comment"]["id"]
    result = signal_from_github("issue_comment", "d-1", payload, GITHUB_US, received_at=NOW)
    assert result == Ignored("unsupported", "comment.id: Field required")


def test_github_delivery_is_unsupported_when_delivery_id_is_empty() -> None:
    payload = _github("issue_comment", "created.json")
    result = signal_from_github("issue_comment", "", payload, GITHUB_US, received_at=NOW)
    assert isinstance(result, Ignored) and result.reason == "unsupported"


# -- text conventions and robustness --------------------------------------------------------


def test_links_are_unique_and_ordered_when_text_repeats_them() -> None:
    text = "see (https://a.test/x), <https://b.test|b> then https://a.test/x!"
    assert find_links(text) == ("https://a.test/x", "https://b.test")


@pytest.mark.parametrize("text", ["", "   ", "stopp", "please stop", "🛑 now"])
def test_no_command_when_text_is_not_exactly_a_command_word(text: str) -> None:
    assert parse_command(text) is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner),
    max_leaves=12,
)
_slack_keys = st.sampled_from(
    ["type", "subtype", "user", "bot_id", "text", "ts", "thread_ts", "channel", "item", "reaction"]
)
_slack_event = st.dictionaries(_slack_keys, _json | st.sampled_from(["message", "app_mention"]))


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(event=_slack_event, raw=_json)
def test_slack_translation_never_raises_when_payload_is_arbitrary(
    event: dict[str, Any], raw: Any
) -> None:
    for envelope in (
        {"type": "event_callback", "event_id": "Ev1", "team_id": "T1", "event": event},
        raw if isinstance(raw, dict) else {"raw": raw},
    ):
        _assert_well_formed(signal_from_slack_event(envelope, SLACK_US, received_at=NOW), "slack")


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    event=st.sampled_from(sorted({event for event, _ in GITHUB_EXPECTED} | {"push"})),
    action=st.sampled_from(["created", "opened", "completed", "edited"]) | _json,
    body=st.dictionaries(
        st.sampled_from(["sender", "repository", "comment", "issue", "check_run", "pull_request"]),
        _json,
    ),
)
def test_github_translation_never_raises_when_payload_is_arbitrary(
    event: str, action: Any, body: dict[str, Any]
) -> None:
    payload = {"action": action, **body}
    result = signal_from_github(event, "d-1", payload, GITHUB_US, received_at=NOW)
    _assert_well_formed(result, "github")
