"""Thread references: written as text and read back unchanged, and nothing else accepted."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runtime.threads import (
    BadThreadRef,
    GitHubCommit,
    GitHubIssue,
    Landed,
    LocalThread,
    SlackChannel,
    SlackThread,
    ThreadRef,
    parse_channel,
    parse_landed,
    parse_thread,
)

ROOT = SlackThread("T0123ABCD", "C0123456789", "1700000000.000100")
ISSUE = GitHubIssue("acme/ops.tools", 12)
COMMIT = GitHubCommit("acme/api", "ec26c3e57ca3a959ca5aad62de7213c562f8c821")
LOCAL = LocalThread("1700000000.000100")

# The forms stored by every Keel so far; they must keep reading back the same.
STORED: list[tuple[str, ThreadRef]] = [
    ("slack:T0123ABCD/C0123456789/1700000000.000100", ROOT),
    (
        "slack:T0123ABCD/C0123456789/1700000000.000100:1700000000.000200",
        ROOT.message("1700000000.000200"),
    ),
    ("github:acme/ops.tools#12", ISSUE),
    ("github:acme/ops.tools#12:4927004", ISSUE.comment(4927004)),
    ("github:acme/api@ec26c3e57ca3a959ca5aad62de7213c562f8c821", COMMIT),
    ("local:1700000000.000100", LOCAL),
    ("local:1700000000.000100:3", LocalThread("1700000000.000100", "3")),
]


@pytest.mark.parametrize(("text", "ref"), STORED, ids=[text for text, _ in STORED])
def test_stored_text_reads_back_as_its_ref_and_is_written_the_same_when_round_tripped(
    text: str, ref: ThreadRef
) -> None:
    assert parse_thread(text) == ref
    assert str(ref) == text


@pytest.mark.parametrize(
    "text",
    [
        "",
        "slack:T1/C1",
        "slack:T1/C1/1700000000",  # a Slack ts always has its fraction
        "slack:T1/C1/1.0:",
        "slack:T1/C1/1.0:2.0:3.0",
        "slack:T1/C 1/1.0",
        "slack:C1:1700000000.000200",  # the old form of a landed post, migrated by 0005
        "github:acme/ops",
        "github:acme/ops#0",
        "github:acme/ops#12:comment99",
        "github:acme#12",
        "github:acme/ops@xyz",
        "gitlab:acme/ops#12",
        " github:acme/ops#12",
        "github:acme/ops#12\n",
        "local:",
        "local:run 1",
        "local:run/1",
        "local:run:",
        "local:run:1:2",
        "keel-run:terminal",
    ],
)
def test_malformed_text_is_refused_with_the_forms_when_parsed(text: str) -> None:
    with pytest.raises(BadThreadRef) as refused:
        parse_thread(text)
    message = str(refused.value)
    assert message.startswith(f"not a thread reference: {text!r}")
    assert "slack:<team>/<channel>/<thread ts>" in message and "github:<owner>/<repo>" in message
    assert "local:<session>[:<message>]" in message


@pytest.mark.parametrize(
    "build",
    [
        lambda: SlackThread("T1", "C1/x", "1.0"),
        lambda: SlackThread("T1", "C1", "now"),
        lambda: SlackThread("T1", "C1", "1.0", "1.0:2.0"),
        lambda: GitHubIssue("acme", 1),
        lambda: GitHubIssue("acme/ops", 0),
        lambda: GitHubIssue("acme/ops", 1, -5),
        lambda: GitHubCommit("acme/ops", "not-a-sha"),
        lambda: LocalThread(""),
        lambda: LocalThread("run:1"),
        lambda: LocalThread("run", "1/2"),
    ],
)
def test_parts_that_could_not_be_read_back_are_refused_when_built(build: object) -> None:
    assert callable(build)
    with pytest.raises(BadThreadRef, match="cannot be part of a thread reference"):
        build()


_ids = st.from_regex(r"[A-Za-z0-9_.-]{1,12}", fullmatch=True)
_ts = st.from_regex(r"[0-9]{1,10}\.[0-9]{1,6}", fullmatch=True)
_repos = st.tuples(_ids, _ids).map("/".join)
_numbers = st.integers(min_value=1, max_value=10**9)
_refs: st.SearchStrategy[ThreadRef] = st.one_of(
    st.builds(SlackThread, _ids, _ids, _ts, st.none() | _ts),
    st.builds(GitHubIssue, _repos, _numbers, st.none() | _numbers),
    st.builds(GitHubCommit, _repos, st.from_regex(r"[0-9a-f]{40}", fullmatch=True)),
    st.builds(LocalThread, _ids, st.none() | _ids),
)


@given(ref=_refs, fallback=st.booleans())
def test_any_ref_reads_back_unchanged_when_written_as_text(ref: ThreadRef, fallback: bool) -> None:
    assert parse_thread(str(ref)) == ref
    assert parse_landed(str(Landed(ref, fallback))) == Landed(ref, fallback)
    assert ref.root.root == ref.root and parse_thread(str(ref.root)) == ref.root


def test_root_drops_the_message_and_surface_and_repo_name_the_conversation_when_asked() -> None:
    reply = ROOT.message("1700000000.000200")
    assert (reply.root, reply.target_ts, ROOT.target_ts) == (
        ROOT,
        "1700000000.000200",
        "1700000000.000100",
    )
    assert ISSUE.comment(7).root == ISSUE and COMMIT.root == COMMIT
    assert LocalThread(LOCAL.session, "2").root == LOCAL and LOCAL.root == LOCAL
    refs = (ROOT, ISSUE, COMMIT, LOCAL)
    assert [r.surface for r in refs] == ["slack", "github", "github", "local"]
    # A Slack thread names no repository: routing maps its channel to one; nor does the
    # terminal's: the task names it.
    assert [r.repo for r in refs] == [None, "acme/ops.tools", "acme/api", None]


def test_landed_text_marks_the_fallback_when_the_post_fell_back() -> None:
    comment = ISSUE.comment(3)
    assert str(Landed(comment)) == "github:acme/ops.tools#12:3"
    assert str(Landed(comment, fallback=True)) == "fallback:github:acme/ops.tools#12:3"
    with pytest.raises(BadThreadRef):
        parse_landed("fallback:")
    assert parse_landed("local:1700000000.000100:2") == Landed(LocalThread(LOCAL.session, "2"))



@pytest.mark.parametrize(
    ("text", "channel"),
    [
        ("C0FALLBACK", SlackChannel("C0FALLBACK")),
        ("#keel-ops", SlackChannel("#keel-ops")),
        ("slack:T1/C0OPS", SlackChannel("C0OPS", team="T1")),
    ],
)
def test_a_fallback_channel_is_read_from_its_id_name_or_team_and_id(
    text: str, channel: SlackChannel
) -> None:
    assert parse_channel(text) == channel
    assert parse_channel(str(channel)) == channel


@pytest.mark.parametrize(
    "text", ["keel-ops", "#Keel Ops", "slack:T1/C1/1700000000.000100", "T1/C0OPS", "", "#"]
)
def test_text_that_names_no_channel_is_refused_when_read_as_a_channel(text: str) -> None:
    with pytest.raises(BadThreadRef):
        parse_channel(text)


def test_a_channel_holds_its_threads_and_a_name_cannot_tell() -> None:
    thread = SlackThread("T1", "C0OPS", "1700000000.000100")
    assert SlackChannel("C0OPS").holds(thread)
    assert SlackChannel("C0OPS", team="T1").holds(thread)
    assert not SlackChannel("C0OPS", team="T2").holds(thread)
    assert not SlackChannel("C0OTHER").holds(thread)
    assert SlackChannel("#keel-ops").holds(thread)
