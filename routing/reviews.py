"""Which requests are code reviews, and the agent a review task runs as.

The GitHub adapter writes every review request of a pull request (``@keel review`` on its
conversation, a review requested from the bot, an automatic review of a push) as text that
starts "Review pull request #N."; such a request runs as the read-only ``review`` agent (Keel
always has one: ``agents.review`` or one derived from the default agent, see
``runtime.config.review_agent``) unless it also asks for fixes ("review and fix the typos"),
which needs the routed agent's write tools.
"""

from __future__ import annotations

import re

from runtime.config import REVIEW_AGENT
from runtime.threads import GitHubIssue, SlackThread, ThreadRef

_REVIEW = re.compile(r"^Review pull request #\d+\.")
# Fixes only when the asker's own words right after "review" ask for them ("review and fix
# the typos"): "review, but don't fix anything" must not widen the task's tools.
_FIXES = re.compile(r"^Review pull request #\d+\.\s+(and|then|&|\+)\s+(fix|apply|push)\b", re.I)


def review_text(number: int, rest: str = "") -> str:
    """The one text form of a pull request's review request; ``rest`` is what the asker
    added ("focus on the migration")."""
    said = f"Review pull request #{number}."
    return f"{said} {rest.strip()}" if rest.strip() else said


def is_review(text: str) -> bool:
    return _REVIEW.match(text) is not None


def agent_for(text: str, thread: ThreadRef | None, routed: str) -> str:
    """``review`` for a read-only review of a pull request (asked on it, or in a Slack thread
    that links it), else the routed agent."""
    reviewing = isinstance(thread, GitHubIssue | SlackThread) and is_review(text)
    return REVIEW_AGENT if reviewing and not _FIXES.match(text) else routed


_ASKS_REVIEW = re.compile(r"^\s*review\b[\s,:]*", re.IGNORECASE)


def linked_review(text: str, pull: int | None) -> str | None:
    """A Slack request that starts with "review" and links a pull request (``pull``, as the
    repository choice read it) is that pull request's review request, in the one text form
    (``review_text``); None for any other request."""
    if pull is None or not _ASKS_REVIEW.match(text):
        return None
    return review_text(pull, _ASKS_REVIEW.sub("", text, count=1))
