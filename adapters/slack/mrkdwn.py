"""Keel's replies (Markdown) as Slack mrkdwn, safe to post whatever the model wrote.

Slack reads ``&``, ``<`` and ``>`` as control characters: ``<!channel>``, ``<!here>`` and
``<@U123>`` ping people, ``<url|text>`` is a link. Every one of them in the text is escaped
(``&amp;`` ``&lt;`` ``&gt;``), code included, so the only ``<…>`` Slack sees are the links
this module writes. Markdown is converted: ``**b**`` → ``*b*``, ``*i*`` → ``_i_``,
``~~s~~`` → ``~s~``, ``[t](u)`` → ``<u|t>`` (http, https and mailto only; any other scheme
reads ``t (u)``), ``# h`` → ``*h*``, ``- item`` → ``• item``, ``> quote`` → ``&gt; quote``;
fenced and indented code becomes a fence (without the language, which Slack would show) and
inline code keeps its backticks, with nothing inside converted. Raw HTML is text.

The one exception to the escaping: a user an operator lists in ``slack.allowed_mentions``
(``<@U123>``, or ``<@U123|name>``) outside code stays a mention. Channel-wide pings
(``<!channel>``, ``<!here>``, ``<!everyone>``) and user groups (``<!subteam^S…>``) never do.

The Markdown is parsed by markdown-it-py (CommonMark, plus ``~~strikethrough~~``) and its
syntax tree rendered here. The maintained converters on PyPI (md2mrkdwn rewrites lines with
regular expressions; markdown-to-mrkdwn) document neither escaping Slack's control characters
nor a list of who may be pinged, and markdown-to-mrkdwn keeps fence languages; Keel's safety is
that every text node is escaped, which needs the tree, so the small renderer is ours.
Blank lines between blocks are kept as the source had them.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Collection
from urllib.parse import quote

from markdown_it import MarkdownIt
from markdown_it.tree import SyntaxTreeNode

_USER_MENTION = re.compile(r"<@([UW][A-Z0-9]+)(?:\|[^<>]*)?>")
_SAFE_SCHEMES = ("http://", "https://", "mailto:")


def _parser() -> MarkdownIt:
    md = MarkdownIt("commonmark").enable("strikethrough")
    # Every [t](u) is parsed as a link, whatever its scheme: _link decides what Slack gets
    # (markdown-it would leave a javascript: link as literal brackets instead).
    md.validateLink = lambda url: True  # type: ignore[method-assign]
    return md


_MARKDOWN = _parser()


def escape(text: str) -> str:
    """Slack's three control characters, as Slack asks them to be written."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def to_mrkdwn(markdown: str, allowed: Collection[str] = ()) -> str:
    """The whole reply, converted block by block; no one is pinged but the users in
    ``allowed``."""
    lines = markdown.replace("\r\n", "\n").split("\n")
    tree = SyntaxTreeNode(_MARKDOWN.parse(markdown))
    renderer = _Renderer(lines, frozenset(allowed))
    body = renderer.blocks(tree.children)
    leading = _blank_run(lines, 0, len(lines))
    # What followed the last block (a final newline, blank lines) is kept, as before.
    trailing = len(markdown) - len(markdown.rstrip("\n"))
    if not body:
        return escape(markdown)
    return "\n" * leading + body + "\n" * trailing


def _blank_run(lines: list[str], start: int, stop: int) -> int:
    count = 0
    for line in lines[start:stop]:
        if line.strip():
            break
        count += 1
    return count


class _Renderer:
    def __init__(self, lines: list[str], allowed: frozenset[str]) -> None:
        self.lines, self.allowed = lines, allowed
        self.in_bold = False

    def blocks(
        self, nodes: list[SyntaxTreeNode], render: Callable[[SyntaxTreeNode], str] | None = None
    ) -> str:
        """Sibling blocks (or a list's items), separated by as many blank lines as the source
        put between them."""
        out = ""
        previous_end: int | None = None
        for node in nodes:
            text = (render or self.block)(node)
            if node.map is not None and previous_end is not None:
                end = previous_end
                while end > 0 and not self.lines[end - 1].strip():
                    end -= 1  # a list's map reaches over the blank lines after it
                out += "\n" * (max(node.map[0] - end, 0) + 1)
            elif out:
                out += "\n"
            out += text
            if node.map is not None:
                previous_end = node.map[1]
        return out

    def block(self, node: SyntaxTreeNode) -> str:
        match node.type:
            case "paragraph":
                return self.inline_of(node)
            case "heading":
                return self.bold(lambda: self.inline_of(node))
            case "fence" | "code_block":
                code = node.content[:-1] if node.content.endswith("\n") else node.content
                return f"```\n{escape(code)}\n```"
            case "bullet_list" | "ordered_list":
                return self.blocks(node.children, lambda child: self.item(child, node))
            case "blockquote":
                quoted = self.blocks(node.children).split("\n")
                return "\n".join(f"&gt; {line}" if line else "&gt;" for line in quoted)
            case "html_block":  # text, like a paragraph: "<!channel> <@U1> said" is one
                return self.text(node.content.rstrip("\n"))
            case "hr":
                assert node.map is not None
                return escape(self.lines[node.map[0]].strip())
            case _:  # a block type CommonMark does not have: its source, as text
                start, stop = node.map or (0, 0)
                return escape("\n".join(self.lines[start:stop]))

    def item(self, node: SyntaxTreeNode, parent: SyntaxTreeNode) -> str:
        marker = "• " if parent.type == "bullet_list" else f"{node.info}{node.markup} "
        body = self.blocks(node.children).split("\n")
        pad = " " * len(marker)
        return "\n".join([marker + body[0], *(pad + line if line else "" for line in body[1:])])

    def inline_of(self, node: SyntaxTreeNode) -> str:
        return "".join(self.inline(child) for child in node.children[0].children)

    def inline(self, node: SyntaxTreeNode) -> str:
        match node.type:
            case "text":
                return self.text(node.content)
            case "softbreak" | "hardbreak":
                return "\n"
            case "code_inline":
                return f"`{escape(node.content)}`"
            case "strong":
                return self.bold(lambda: self.children(node))
            case "em":
                return f"_{self.children(node)}_"
            case "s":
                return f"~{self.children(node)}~"
            case "link":
                return _link(_plain(node), str(node.attrs.get("href", "")))
            case "image":
                return _link(_plain(node), str(node.attrs.get("src", "")))
            case "html_inline":
                return self.text(node.content)
            case _:
                return escape(node.content)

    def bold(self, render: Callable[[], str]) -> str:
        """``*…*`` once: bold inside bold (a heading's, or nested ``**``) adds no asterisks,
        which Slack would show."""
        if self.in_bold:
            return render()
        self.in_bold = True
        try:
            return f"*{render()}*"
        finally:
            self.in_bold = False

    def children(self, node: SyntaxTreeNode) -> str:
        return "".join(self.inline(child) for child in node.children)

    def text(self, text: str) -> str:
        """Escaped text, where an allowed user's mention stays a mention."""
        out, position = [], 0
        for mention in _USER_MENTION.finditer(text):
            if mention.group(1) in self.allowed:
                out += [escape(text[position : mention.start()]), f"<@{mention.group(1)}>"]
                position = mention.end()
        out.append(escape(text[position:]))
        return "".join(out)


def _plain(node: SyntaxTreeNode) -> str:
    """A link's label as plain text (Slack shows no formatting inside a link)."""
    if node.type in ("text", "code_inline", "html_inline"):
        return node.content
    if node.type in ("softbreak", "hardbreak"):
        return " "
    return "".join(_plain(child) for child in node.children)


def _link(label: str, url: str) -> str:
    if not url.lower().startswith(_SAFE_SCHEMES):
        return escape(f"{label} ({url})")
    # Inside <…> a "|" ends the URL and ">" the link: percent-encode them, as browsers would.
    target = escape(quote(url, safe=":/?#[]@!$&'()*+,;=%~-._"))
    return f"<{target}|{escape(label).replace('|', '¦')}>"
