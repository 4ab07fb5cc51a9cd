"""Keel's replies (Markdown) as Slack mrkdwn, safe to post whatever the model wrote.

Slack reads ``&``, ``<`` and ``>`` as control characters: ``<!channel>``, ``<!here>`` and
``<@U123>`` ping people, ``<url|text>`` is a link. Every one of them in the text is escaped
(``&amp;`` ``&lt;`` ``&gt;``), code included, so the only ``<…>`` Slack sees are the links
this module writes. Markdown is converted: ``**b**`` → ``*b*``, ``*i*`` → ``_i_``,
``~~s~~`` → ``~s~``, ``[t](u)`` → ``<u|t>`` (http, https and mailto only), ``# h`` → ``*h*``,
``- item`` → ``• item``; fenced code keeps its fence (without the language, which Slack
would show) and inline code its backticks, with nothing inside converted.

The one exception to the escaping: a user an operator lists in ``slack.allowed_mentions``
(``<@U123>``, or ``<@U123|name>``) outside code stays a mention. Channel-wide pings
(``<!channel>``, ``<!here>``, ``<!everyone>``) and user groups (``<!subteam^S…>``) never do.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from urllib.parse import quote

_FENCE = re.compile(r"^```[^\n`]*\n(.*?)\n?```[ \t]*$", re.DOTALL | re.MULTILINE)
_INLINE_CODE = re.compile(r"(`+)(.+?)\1", re.DOTALL)
_LINK = re.compile(r"\[([^\]\n]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"(\*\*|__)(?=\S)(.+?)(?<=\S)\1")
_ITALIC = re.compile(r"(?<![*\w])\*(?=\S)([^*\n]+?)(?<=\S)\*(?![*\w])")
_STRIKE = re.compile(r"~~(?=\S)(.+?)(?<=\S)~~")
_HEADING = re.compile(r"^[ \t]{0,3}#{1,6}[ \t]+(.+?)[ \t#]*$", re.MULTILINE)
_BULLET = re.compile(r"^([ \t]*)[-*+][ \t]+", re.MULTILINE)
_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^<>]*)?>")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")
# Private-use characters stand in for the markup we write, so escaping cannot touch it.
_BOLD_MARK = "\ue000"
_HOLE = "\ue001"


def escape(text: str) -> str:
    """Slack's three control characters, as Slack asks them to be written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str, allowed: Collection[str] = ()) -> str:
    """The whole reply: fenced blocks kept as code, everything between them converted; no
    one is pinged but the users in ``allowed``."""
    mentionable = frozenset(allowed)
    markdown = markdown.replace(_HOLE, "").replace(_BOLD_MARK, "")
    parts: list[str] = []
    position = 0
    for fence in _FENCE.finditer(markdown):
        parts.append(_prose(markdown[position : fence.start()], mentionable))
        parts.append(f"```\n{escape(fence.group(1))}\n```")
        position = fence.end()
    parts.append(_prose(markdown[position:], mentionable))
    return "".join(parts)


def _prose(text: str, allowed: frozenset[str]) -> str:
    holes: list[str] = []

    def hold(rendered: str) -> str:
        holes.append(rendered)
        return f"{_HOLE}{len(holes) - 1}{_HOLE}"

    text = _INLINE_CODE.sub(lambda m: hold(f"`{escape(m.group(2))}`"), text)
    text = _LINK.sub(lambda m: hold(_link(m.group(1), m.group(2))), text)
    text = _USER_MENTION.sub(
        lambda m: hold(f"<@{m.group(1)}>") if m.group(1) in allowed else m.group(0), text
    )
    text = escape(text)
    text = _HEADING.sub(lambda m: f"{_BOLD_MARK}{m.group(1)}{_BOLD_MARK}", text)
    text = _BULLET.sub(lambda m: f"{m.group(1)}• ", text)
    text = _BOLD.sub(lambda m: f"{_BOLD_MARK}{m.group(2)}{_BOLD_MARK}", text)
    text = _ITALIC.sub(r"_\1_", text)
    text = _STRIKE.sub(r"~\1~", text).replace(_BOLD_MARK, "*")
    return re.sub(f"{_HOLE}(\\d+){_HOLE}", lambda m: holes[int(m.group(1))], text)


def _link(label: str, url: str) -> str:
    if not url.lower().startswith(_SAFE_SCHEMES):
        return escape(f"{label} ({url})")
    # Inside <…> a "|" ends the URL and ">" the link: percent-encode them, as browsers would.
    target = escape(quote(url, safe=":/?#[]@!$&'()*+,;=%~-._"))
    return f"<{target}|{escape(label).replace('|', '¦')}>"
