"""Request signature checks: GitHub's X-Hub-Signature-256 and Slack's v0 signature.

Good signatures are computed here from the providers' documented recipes, independently of
the code under test.
"""

from __future__ import annotations

import hashlib
import hmac
from datetime import UTC, datetime, timedelta

import pytest

from adapters.emulators.corpus import corpora_root
from adapters.github.verify import verify_github_signature
from adapters.slack.verify import verify_slack_signature

CORPORA = corpora_root()
GITHUB_BODY = (CORPORA / "github" / "webhooks" / "issue_comment" / "created.json").read_bytes()
SLACK_BODY = (CORPORA / "slack" / "events" / "app_mention.json").read_bytes()
GITHUB_SECRET = b"It's a Secret to Everybody"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
SIGNED_AT = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)


def github_header(body: bytes, secret: bytes = GITHUB_SECRET) -> str:
    return "sha256=" + hmac.new(secret, body, hashlib.sha256).hexdigest()


def slack_signature(body: bytes, timestamp: str, secret: str = SLACK_SECRET) -> str:
    base = b"v0:" + timestamp.encode() + b":" + body
    return "v0=" + hmac.new(secret.encode(), base, hashlib.sha256).hexdigest()


def slack_check(
    body: bytes = SLACK_BODY,
    *,
    timestamp: str | None = None,
    signature: str | None = None,
    now: datetime = SIGNED_AT,
) -> bool:
    stamp = str(int(SIGNED_AT.timestamp())) if timestamp is None else timestamp
    signed = slack_signature(SLACK_BODY, stamp) if signature is None else signature
    return verify_slack_signature(SLACK_SECRET, body, timestamp=stamp, signature=signed, now=now)


def test_github_signature_is_accepted_when_it_matches_the_body() -> None:
    assert verify_github_signature(GITHUB_SECRET, GITHUB_BODY, github_header(GITHUB_BODY))


def test_github_signature_matches_githubs_published_example_when_checked() -> None:
    # The worked example from GitHub's "Validating webhook deliveries" documentation.
    header = "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    assert verify_github_signature(GITHUB_SECRET, b"Hello, World!", header)


@pytest.mark.parametrize(
    "header",
    [
        github_header(GITHUB_BODY, b"another secret"),
        github_header(GITHUB_BODY + b" "),
        github_header(GITHUB_BODY).upper().replace("SHA256=", "sha256="),
        "sha1=" + hmac.new(GITHUB_SECRET, GITHUB_BODY, hashlib.sha1).hexdigest(),
        "sha256=",
        "sha256=ünïcode",
    ],
    ids=["wrong-secret", "other-body", "uppercase-hex", "sha1", "empty-digest", "non-ascii"],
)
def test_github_signature_is_rejected_when_it_does_not_match(header: str) -> None:
    assert not verify_github_signature(GITHUB_SECRET, GITHUB_BODY, header)


@pytest.mark.parametrize("header", [None, ""], ids=["absent", "empty"])
def test_github_signature_is_rejected_when_header_is_missing(header: str | None) -> None:
    assert not verify_github_signature(GITHUB_SECRET, GITHUB_BODY, header)


def test_slack_signature_is_accepted_when_fresh_and_matching() -> None:
    assert slack_check()


def test_slack_signature_is_accepted_when_just_inside_the_five_minute_window() -> None:
    assert slack_check(now=SIGNED_AT + timedelta(minutes=5))
    assert slack_check(now=SIGNED_AT - timedelta(minutes=5))


def test_slack_signature_is_rejected_when_older_than_five_minutes() -> None:
    assert not slack_check(now=SIGNED_AT + timedelta(minutes=5, seconds=1))


def test_slack_signature_is_rejected_when_body_was_changed() -> None:
    assert not slack_check(SLACK_BODY.replace(b"Hi there!", b"Hi there?"))


@pytest.mark.parametrize(
    ("timestamp", "signature"),
    [
        (None, "v0=" + "0" * 64),
        (None, "v0=ünïcode"),
        ("", None),
        ("yesterday", None),
    ],
    ids=["wrong-digest", "non-ascii-signature", "empty-timestamp", "non-numeric-timestamp"],
)
def test_slack_signature_is_rejected_when_malformed(
    timestamp: str | None, signature: str | None
) -> None:
    assert not slack_check(timestamp=timestamp, signature=signature)


def test_slack_signature_is_rejected_when_headers_are_absent() -> None:
    assert not verify_slack_signature(
        SLACK_SECRET, SLACK_BODY, timestamp=None, signature=None, now=SIGNED_AT
    )
