"""Keel's replies (Markdown) as a GitHub comment body that pings nobody.

GitHub renders the Markdown as it is; what must not pass is a notification the model wrote:
``@login`` and ``@org/team`` outside code get an empty HTML comment after the ``@`` (the
mention still reads the same, as Dependabot writes it), and Slack's control sequences
(``<!channel>``, ``<@U123>``) are shown as text rather than swallowed as HTML. Code, fenced
or inline, is left exactly as written.
"""

from __future__ import annotations

import re

_CODE = re.compile(r"^```.*?^```[ \t]*$|(`+).+?\1", re.DOTALL | re.MULTILINE)
# An @ that GitHub would read as a mention: not part of an e-mail address or word.
_MENTION = re.compile(r"(?<![\w@/`])@(?=[A-Za-z0-9][A-Za-z0-9-]*)")
_SLACK_TOKEN = re.compile(r"<([!@#][^<>\s]*)>")


def to_github(markdown: str) -> str:
    parts: list[str] = []
    position = 0
    for code in _CODE.finditer(markdown):
        parts.append(_prose(markdown[position : code.start()]))
        parts.append(code.group(0))
        position = code.end()
    parts.append(_prose(markdown[position:]))
    return "".join(parts)


def _prose(text: str) -> str:
    text = _SLACK_TOKEN.sub(r"&lt;\1&gt;", text)
    return _MENTION.sub("@<!-- -->", text)
