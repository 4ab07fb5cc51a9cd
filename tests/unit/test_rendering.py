"""Keel's Markdown replies rendered per surface: model text cannot ping anyone or break out.

The same hostile model output goes through the Slack renderer (mrkdwn) and the GitHub one.
"""

from __future__ import annotations

import re

from adapters.github.markdown import to_github
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
