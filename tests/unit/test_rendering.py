"""Keel's Markdown replies rendered per surface: model text cannot ping anyone or break out.

The same hostile model output goes through the Slack renderer (mrkdwn) and the GitHub one.
"""

from __future__ import annotations

import re

from hypothesis import given, settings
from hypothesis import strategies as st

from adapters.github.markdown import title_for_github, to_github
from adapters.slack.mrkdwn import to_mrkdwn
from runtime.evidence import EvidenceItem, Strength
from runtime.reporting import completion_text
from runtime.store.records import TaskResult, TaskStatus

HOSTILE = """Heads up <!channel> and <!here>, <@U123> broke it & I fixed it.
**bold** move, *quiet* one, ~~old~~ and [the PR](https://x.example/pr?a=1&b=2).
Also [evil](javascript:alert(1)) and <https://phish.example|click me>.
```python
if a < b && c > d:
    print("**not bold** <!channel>")
```
Ping @octocat and @acme/reviewers, mail me at dev@example.com."""

# Everything Slack would turn into a notification or a link it did not get from us.
_SLACK_CONTROL = re.compile(r"<(?!https://x\.example/pr\?a=1&amp;b=2\|the PR>)[^>]*>")


def test_slack_rendering_escapes_every_ping_and_converts_markdown() -> None:
    text = to_mrkdwn(HOSTILE)

    assert _SLACK_CONTROL.findall(text) == []  # the one <…> left is our own link
    assert "&lt;!channel&gt;" in text and "&lt;!here&gt;" in text and "&lt;@U123&gt;" in text
    assert "broke it &amp; I fixed it" in text
    assert "*bold* move" in text and "_quiet_ one" in text and "~old~" in text
    assert "<https://x.example/pr?a=1&amp;b=2|the PR>" in text
    assert "evil (javascript:alert(1))" in text  # not a link
    assert "&lt;https://phish.example|click me&gt;" in text


def test_slack_rendering_keeps_code_fences_and_converts_nothing_inside() -> None:
    text = to_mrkdwn(HOSTILE)

    fence = text[text.index("```") : text.rindex("```") + 3]
    assert fence == (
        "```\nif a &lt; b &amp;&amp; c &gt; d:\n"
        '    print("**not bold** &lt;!channel&gt;")\n```'
    )
    assert "python" not in text  # Slack would print the language as code


def test_github_rendering_neutralises_mentions_and_slack_sequences_outside_code() -> None:
    text = to_github(HOSTILE)

    assert re.findall(r"(?<![\w`])@(?!<!-- -->)[A-Za-z]", text) == []  # no live @mention
    assert "@<!-- -->octocat" in text and "@<!-- -->acme/reviewers" in text
    assert "dev@example.com" in text  # an address is not a mention
    # Slack sequences show as text; the @ inside is neutralised like any other.
    assert "&lt;!channel&gt;" in text and "&lt;@<!-- -->U123&gt;" in text
    assert "**bold** move" in text and "[the PR](https://x.example/pr?a=1&b=2)" in text
    assert '```python\nif a < b && c > d:\n    print("**not bold** <!channel>")\n```' in text


def test_completion_reply_is_markdown_that_each_surface_renders() -> None:
    evidence = [EvidenceItem("commit", "abc", Strength.provider_read_back, {"sha": "abc1234"})]
    body = completion_text(TaskResult(TaskStatus.succeeded, HOSTILE), evidence, [])

    assert "**Evidence**\n- Commit abc1234 — read back from the provider" in body
    slack = to_mrkdwn(body)
    assert "*Evidence*\n• Commit abc1234" in slack and "&lt;!channel&gt;" in slack
    github = to_github(body)
    assert "**Evidence**\n- Commit abc1234" in github and "@<!-- -->octocat" in github


def test_github_rendering_keeps_only_allowed_mentions_live_when_an_allow_list_is_set() -> None:
    text = to_github(HOSTILE, allowed=("OctoCat", "@acme/reviewers"))

    assert "Ping @octocat and @acme/reviewers" in text  # logins compare without case
    assert "&lt;@<!-- -->U123&gt;" in text
    assert to_github("@acme/reviewers-2 and @acme", allowed=("acme/reviewers",)) == (
        "@<!-- -->acme/reviewers-2 and @<!-- -->acme"
    )


def test_pull_request_title_breaks_mentions_with_an_invisible_space_when_written() -> None:
    title = title_for_github("Fix for @acme/reviewers, see `@keep`", allowed=("nobody",))

    assert title == "Fix for @\u200bacme/reviewers, see `@keep`"  # a title shows no HTML
    assert title_for_github("cc @octocat", allowed=("octocat",)) == "cc @octocat"


def test_slack_rendering_keeps_only_allowed_users_live_when_an_allow_list_is_set() -> None:
    text = to_mrkdwn(f"{HOSTILE}\n<@U777|ops> and `<@U123>`", allowed=("U123", "U777"))

    assert "<@U123> broke it" in text and "<@U777> and" in text
    assert "`&lt;@U123&gt;`" in text  # code stays code
    assert "&lt;!channel&gt;" in text and "&lt;!here&gt;" in text
    assert "&lt;!subteam^S1&gt;" in to_mrkdwn("<!subteam^S1>", allowed=("S1", "U123"))


def test_slack_rendering_follows_the_markdown_structure() -> None:
    source = (
        "# Fix for **calc**\n"
        "- one\n  - nested `<!here>`\n\n- after a blank line\n"
        "1. first\n2. second\n\n"
        "> quoted <!channel>\n\n"
        "    indented code *stays*\n\n"
        "&lt;@U123&gt; is already text; <https://auto.example> autolinks\n"
    )
    assert to_mrkdwn(source) == (
        "*Fix for calc*\n"
        "• one\n  • nested `&lt;!here&gt;`\n\n• after a blank line\n"
        "1. first\n2. second\n\n"
        "&gt; quoted &lt;!channel&gt;\n\n"
        "```\nindented code *stays*\n```\n\n"
        "&lt;@U123&gt; is already text; "
        "<https://auto.example|https://auto.example> autolinks\n"
    )


def test_slack_link_labels_are_plain_escaped_text_that_cannot_end_the_link() -> None:
    text = to_mrkdwn("[**a|b** <!here>](https://x.example/a|b>c)")
    assert text == "<https://x.example/a%7Cb%3Ec|a¦b &lt;!here&gt;>"
    assert to_mrkdwn("[t](JavaScript:alert(1))") == "t (JavaScript:alert(1))"


def test_an_allowed_mention_stays_live_where_markdown_sees_html() -> None:
    # A line starting with "<!" is an HTML block to CommonMark; it is still text here.
    text = to_mrkdwn("<!channel> <@U1> and <@U2>: fixed", allowed=("U2",))
    assert text == "&lt;!channel&gt; &lt;@U1&gt; and <@U2>: fixed"
    assert to_mrkdwn("<b><@U2></b>", allowed=("U2",)) == "&lt;b&gt;<@U2>&lt;/b&gt;"


_OURS = re.compile(r"<(?:https?://|mailto:)[^<>|\s]*\|[^<>]*>|<@U2>")


@given(st.text(alphabet="ab <>&@!|*_~`[]()#->\n:/.U2\\h", max_size=80))
@settings(max_examples=300, deadline=None)
def test_whatever_the_markdown_slack_sees_only_our_links_and_allowed_mentions(
    source: str,
) -> None:
    text = to_mrkdwn(source.replace("h", "https://x.example/"), allowed=("U2",))
    assert "<" not in _OURS.sub("", text) and ">" not in _OURS.sub("", text)


def test_the_reply_names_the_repository_the_task_worked_in() -> None:
    body = completion_text(TaskResult(TaskStatus.succeeded, "done"), [], [], repo="probe/two")
    assert "Repository: `probe/two`" in body
    assert "Repository" not in completion_text(TaskResult(TaskStatus.succeeded, "done"), [], [])
