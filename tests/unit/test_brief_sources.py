"""Pure parts of the brief's sources: Slack markup, GitHub links, the bounded diff, retries,
file names, and the demo's need for the earlier thread message."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from adapters.briefing import ThreadContext, github_links, github_web_hosts
from adapters.github.context import closing_refs
from adapters.github.diff import changed_files, unified_diff
from adapters.github.reads import FileChange
from adapters.slack.files import may_send_token
from adapters.slack.markup import mentioned_users, plain_text
from runtime.brief.attempts import Failed, RetryPolicy, attempt
from runtime.brief.files import safe_name
from runtime.brief.model import Gathered, Origin
from runtime.errors import Permanent, Retryable
from runtime.models.base import ModelRequest, UserText
from runtime.models.scripted import ScriptedProvider, ScriptMismatch
from runtime.threads import LocalThread

DEMO_SCRIPT = Path(__file__).resolve().parents[2] / "adapters" / "demo" / "script.yaml"


@pytest.mark.parametrize(
    ("markup", "plain"),
    [
        ("<@U0ALICE001> is right", "@Alice is right"),
        ("<@U0NOBODY01|bob> too", "@bob too"),
        ("<@U0NOBODY01>", "@U0NOBODY01"),
        ("see <#C0KEELGEN1|general>", "see #general"),
        ("<!here> look", "@here look"),
        ("<https://example.com/a|https://example.com/a>", "https://example.com/a"),
        ("<https://example.com/a|example.com/a>", "https://example.com/a"),
        ("<https://example.com/run/7|the failing run>", "the failing run (https://example.com/run/7)"),
        ("<mailto:a@example.com|a@example.com>", "a@example.com"),
        ("if a &lt; b &amp;&amp; c &gt; d", "if a < b && c > d"),
    ],
)
def test_slack_markup_reads_as_plain_text(markup: str, plain: str) -> None:
    assert plain_text(markup, {"U0ALICE001": "Alice"}) == plain


def test_mentioned_users_are_listed_once_in_order() -> None:
    text = "<@U2> and <@U1|x>, again <@U2>"
    assert mentioned_users(text) == ["U2", "U1"]


def test_closing_keywords_name_issues_in_this_and_other_repositories() -> None:
    texts = ["Fixes #12 and closes acme/api#3", "resolved: #12", "see #99", "prefix#4"]
    assert closing_refs(texts, "acme/shop") == [("acme/shop", 12), ("acme/api", 3)]


def test_github_links_are_found_only_on_github_hosts() -> None:
    hosts = github_web_hosts("https://ghe.example.com/api/v3")
    texts = [
        "see https://github.com/acme/shop/issues/12 and https://ghe.example.com/acme/api/pull/3",
        "not https://evil.example/acme/shop/issues/1, again https://github.com/acme/shop/issues/12",
    ]
    assert github_links(texts, hosts) == [("acme/shop", 12), ("acme/api", 3)]
    assert github_web_hosts("https://api.github.com") == frozenset({"github.com"})


def test_diff_is_assembled_only_up_to_its_limit() -> None:
    patch = "\n".join(f"+line {n}" for n in range(200_000))
    files = [FileChange(f"f{n}.py", "modified", 200_000, 0, patch) for n in range(3)]

    diff = unified_diff(files, 10_000)

    assert len(diff) <= 10_100 and diff.startswith("diff --git a/f0.py b/f0.py\n--- a/f0.py")
    assert diff.endswith("diff cut here; 2 more file(s) not shown")
    assert changed_files(files[:1]) == "M f0.py +200000 -0"


def test_bot_token_goes_only_to_slack_file_hosts() -> None:
    api = "https://slack.com/api/"
    assert may_send_token("https://files.slack.com/files-pri/T1-F1/download/a.png", api)
    assert not may_send_token("http://files.slack.com/files-pri/T1-F1/a.png", api)
    assert not may_send_token("https://files.slack.com.evil.example/a.png", api)
    assert may_send_token("http://127.0.0.1:8801/files-pri/T1-F1/a.png", "http://127.0.0.1:8801/api/")


def test_retries_stop_at_the_bound_and_permanent_failures_are_not_repeated() -> None:
    calls: list[str] = []

    async def flaky() -> str:
        calls.append("flaky")
        raise Retryable("HTTP 500")

    async def refused() -> str:
        calls.append("refused")
        raise Permanent("missing_scope")

    policy = RetryPolicy(attempts=3, base_delay_s=0)
    first = asyncio.run(attempt("thread", flaky, policy))
    second = asyncio.run(attempt("names", refused, policy))

    assert first == Failed("thread", "HTTP 500 (tried 3 times)")
    assert second == Failed("names", "missing_scope")
    assert calls == ["flaky"] * 3 + ["refused"]


def test_file_names_from_messages_are_made_safe() -> None:
    assert safe_name("F1", "../../etc/passwd") == "F1-etc_passwd"
    assert safe_name("F2", "screen shot (1).png") == "F2-screen_shot_1_.png"
    assert safe_name("F3", "...") == "F3-file"


def test_demo_script_fails_when_the_brief_lacks_the_earlier_report() -> None:
    provider = ScriptedProvider.from_path(DEMO_SCRIPT)
    mention_only = UserText("## Request\nthe checkout tests are failing on main, can you fix it?")

    with pytest.raises(ScriptMismatch, match="CI on main is red"):
        provider.reply(ModelRequest("t1", 0, "", (mention_only,)))


def test_a_local_thread_is_fetched_from_no_provider() -> None:
    class Untouchable:
        def __getattr__(self, name: str) -> object:
            raise AssertionError(f"asked a provider for {name} of a local thread")

    context = ThreadContext(Untouchable(), Untouchable())  # type: ignore[arg-type]
    origin = Origin("t1", "fix it", thread=LocalThread("1700000000.000100"), repo="local/shop")
    assert asyncio.run(context.gather(origin)) == Gathered()
