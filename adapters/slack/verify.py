"""Slack request signature check (v0, 5-minute timestamp window) for code outside slack-bolt.

The ingress route relies on slack-bolt's own check; this wraps the same slack_sdk verifier
with Keel's clock so tests and tools can ask the question without an app.
"""

from __future__ import annotations

from datetime import datetime

from slack_sdk.signature import Clock as SlackClock
from slack_sdk.signature import SignatureVerifier


class _FixedClock(SlackClock):
    def __init__(self, now: datetime) -> None:
        self._epoch = now.timestamp()

    def now(self) -> float:
        return self._epoch


def verify_slack_signature(
    signing_secret: str,
    body: bytes,
    *,
    timestamp: str | None,
    signature: str | None,
    now: datetime,
) -> bool:
    """True only for a signature Slack made over this body within five minutes of `now`."""
    if timestamp is None or signature is None or not timestamp.isdigit():
        return False
    verifier = SignatureVerifier(signing_secret, clock=_FixedClock(now))
    try:
        return bool(verifier.is_valid(body=body, timestamp=timestamp, signature=signature))
    except (TypeError, UnicodeDecodeError):
        # slack_sdk compares str digests, which rejects non-ASCII input by raising.
        return False
