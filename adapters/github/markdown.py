"""Keel's replies (Markdown) as a GitHub comment body that pings nobody it was not told to.

GitHub renders the Markdown as it is; what must not pass is a notification the model wrote:
``@login`` and ``@org/team`` outside code get an empty HTML comment after the ``@`` (the
mention still reads the same, as Dependabot writes it), and Slack's control sequences
(``<!channel>``, ``<@U123>``) are shown as text rather than swallowed as HTML. Code, fenced
or inline, is left exactly as written. The same holds for what the agent writes through
tools (comments, pull requests, review replies), not only for Keel's replies.

Handles an operator lists in ``github.allowed_mentions`` stay live (GitHub compares logins
without regard to case, and so does this). A pull request's title is plain text, where an
HTML comment would show: there a zero-width space after the ``@`` breaks the mention.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection

_CODE = re.compile(r"^```.*?^```[ \t]*$|(`+).+?\1", re.DOTALL | re.MULTILINE)
# An @ that GitHub would read as a mention (not part of an e-mail address or word), and the
# handle it names: a login, or org/team.
_MENTION = re.compile(
    r"(?<![\w@/`])@([A-Za-z0-9][A-Za-z0-9-]*(?:/[A-Za-z0-9][A-Za-z0-9_.-]*)?)"
)
_SLACK_TOKEN = re.compile(r"<([!@#][^<>\s]*)>")
_IN_BODY = "@<!-- -->"
_IN_TITLE = "@\u200b"


def to_github(markdown: str, allowed: Collection[str] = ()) -> str:
    """A comment or pull request body: no mention outside ``allowed`` stays live."""
    return _outside_code(markdown, lambda prose: _prose(prose, _mentionable(allowed)))


def title_for_github(text: str, allowed: Collection[str] = ()) -> str:
    """A pull request title: mentions outside ``allowed`` broken by an invisible space."""
    wanted = _mentionable(allowed)
    return _outside_code(text, lambda prose: _defused(prose, wanted, _IN_TITLE))


def _mentionable(allowed: Collection[str]) -> frozenset[str]:
    return frozenset(handle.strip().lstrip("@").lower() for handle in allowed)


def _outside_code(text: str, convert: Callable[[str], str]) -> str:
    parts: list[str] = []
    position = 0
    for code in _CODE.finditer(text):
        parts.append(convert(text[position : code.start()]))
        parts.append(code.group(0))
        position = code.end()
    parts.append(convert(text[position:]))
    return "".join(parts)


def _prose(text: str, allowed: frozenset[str]) -> str:
    text = _SLACK_TOKEN.sub(r"&lt;\1&gt;", text)
    return _defused(text, allowed, _IN_BODY)


def _defused(text: str, allowed: frozenset[str], at: str) -> str:
    def one(found: re.Match[str]) -> str:
        handle = found.group(1)
        return found.group(0) if handle.lower() in allowed else f"{at}{handle}"

    return _MENTION.sub(one, text)
