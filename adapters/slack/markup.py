"""Slack's message markup as plain text: ``<@U…>`` mentions as ``@Display Name``, channel
links as ``#name``, ``<url|label>`` links as plain URLs, and Slack's three HTML escapes undone.

Pure: the names come in as a mapping, resolved beforehand (``users.info``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

_SPAN = re.compile(r"<([^<>\s][^<>]*)>")
_USER = re.compile(r"<@([A-Z0-9]+)(?:\|[^>]*)?>")
_ESCAPES = (("&lt;", "<"), ("&gt;", ">"), ("&amp;", "&"))


def mentioned_users(text: str) -> list[str]:
    """User ids mentioned in ``text``, in order of first mention."""
    return list(dict.fromkeys(_USER.findall(text)))


def plain_text(text: str, names: Mapping[str, str]) -> str:
    """``text`` as a person reads it in Slack."""
    converted = _SPAN.sub(lambda found: _span(found.group(1), names), text)
    for escaped, character in _ESCAPES:
        converted = converted.replace(escaped, character)
    return converted


def _span(inner: str, names: Mapping[str, str]) -> str:
    target, _, label = inner.partition("|")
    if target.startswith("@"):
        user = target[1:]
        return "@" + (names.get(user) or label or user)
    if target.startswith("#"):
        return "#" + (label or target[1:])
    if target.startswith("!subteam^"):
        return label or "@group"
    if target.startswith("!"):
        return "@" + (label.lstrip("@") or target[1:].split("^")[0])
    if target.startswith("mailto:"):
        return label or target.removeprefix("mailto:")
    return _link(target, label)


def _link(url: str, label: str) -> str:
    """The URL itself; a label that says something else is kept before it."""
    bare = url.split("://", 1)[-1].rstrip("/")
    if not label or label.rstrip("/") in (url, bare):
        return url
    return f"{label} ({url})"
