"""Keel's reply model and its one text form, Markdown, which each surface renders at the wire.

A reply is a headline, free paragraphs (the model's summary among them: Markdown as the
model wrote it, code fences included), an evidence list and notes. ``to_markdown`` is the
body the outbox stores; Slack turns it into escaped mrkdwn, GitHub into a comment that pings
nobody (``adapters/slack/mrkdwn.py``, ``adapters/github/markdown.py``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Reply:
    headline: str
    paragraphs: tuple[str, ...] = ()
    evidence: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()
    link: str | None = None
    spend: str | None = None  # "12.4k tokens · $0.03 · 6 turns", the reply's last line
    repo: str | None = None  # the repository the task worked in, named before its link


def to_markdown(reply: Reply) -> str:
    blocks = [reply.headline, *(p.strip() for p in reply.paragraphs if p.strip())]
    if reply.evidence:
        blocks.append("**Evidence**\n" + "\n".join(f"- {line}" for line in reply.evidence))
    blocks += reply.notes
    if reply.repo:
        blocks.append(f"Repository: `{reply.repo}`")
    if reply.link:
        blocks.append(f"Task details: {reply.link}")
    if reply.spend:
        blocks.append(f"_{reply.spend}_")
    return "\n\n".join(blocks)
