"""The brief as text: a stable, labelled layout that never exceeds ``max_chars``.

Space goes first to the facts, the request and the list of gaps and files; the sections share
what is left, each cut in its own way: a conversation keeps its first message and as many of
the latest as fit, saying how many earlier ones were left out; a text (an issue body, a diff)
keeps its first lines and says how many more there were. A last cut holds the bound whatever
the input.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from runtime.brief.model import FileRef, Gathered, Post, Section

TITLE = "# Task brief"
_FACT_CHARS = 400
_LIST_ITEMS = 20
_ITEM_CHARS = 300
_CLIPPED = "\n… (brief cut at its size bound)"


@dataclass(frozen=True, slots=True)
class FileNote:
    """What became of an attached file: where it was saved, or why it was not."""

    saved_as: str | None = None
    shown: bool = False
    note: str | None = None


def render(brief: Gathered, files: Mapping[str, FileNote], max_chars: int) -> str:
    head = _head(brief, max_chars)
    tail = _tail(brief, files)
    titles = [f"## {section.title}\n" for section in brief.sections]
    room = max_chars - len(head) - len(tail) - sum(len(t) + 2 for t in titles) - 2
    sizes = [len(_full(section)) for section in brief.sections]
    bodies = [
        title + _fit(section, share)
        for title, section, share in zip(
            titles, brief.sections, shares(sizes, max(room, 0)), strict=True
        )
    ]
    return clip("\n\n".join(part for part in (head, *bodies, tail) if part), max_chars)


def clip(text: str, max_chars: int) -> str:
    if len(text) <= max_chars:
        return text
    return text[: max(max_chars - len(_CLIPPED), 0)] + _CLIPPED


def shares(sizes: Sequence[int], room: int) -> list[int]:
    """Split ``room`` so no part gets more than it needs and the rest share alike."""
    given = [0] * len(sizes)
    left = room
    for count, index in enumerate(sorted(range(len(sizes)), key=lambda i: sizes[i])):
        fair = left // (len(sizes) - count)
        given[index] = min(sizes[index], fair)
        left -= given[index]
    return given


# -- head and tail ----------------------------------------------------------------------------


def _head(brief: Gathered, max_chars: int) -> str:
    facts = [f"{label}: {_short(value, _FACT_CHARS)}" for label, value in brief.facts]
    request = fit_text(brief.request.strip() or "(no text)", max_chars // 4)
    return "\n".join([TITLE, *facts]) + "\n\n## Request\n" + request


def _tail(brief: Gathered, files: Mapping[str, FileNote]) -> str:
    parts = []
    if brief.downloads:
        lines = [_download_line(d.file, files.get(d.file.file_id)) for d in brief.downloads]
        parts.append("## Files attached in the thread\n" + _listed(lines))
    if brief.missing:
        parts.append("## Could not fetch\n" + _listed(list(brief.missing)))
    return "\n\n".join(parts)


def _listed(lines: list[str]) -> str:
    shown = [f"- {_short(line, _ITEM_CHARS)}" for line in lines[:_LIST_ITEMS]]
    if len(lines) > _LIST_ITEMS:
        shown.append(f"- … {len(lines) - _LIST_ITEMS} more")
    return "\n".join(shown)


def _download_line(file: FileRef, note: FileNote | None) -> str:
    where = _describe(file)
    if note is None:
        return f"{where}: not saved"
    done = [f"saved in the workspace as {note.saved_as}"] if note.saved_as else []
    if note.shown:
        done.append("shown to you as an image")
    if note.note:
        done.append(note.note)
    return f"{where}: {'; '.join(done) or 'not saved'}"


def _describe(file: FileRef) -> str:
    return f"{file.name} ({file.media_type}, {human_size(file.size)})"


def human_size(size: int) -> str:
    if size < 1024:
        return f"{size} B"
    if size < 1024 * 1024:
        return f"{size / 1024:.1f} KB"
    return f"{size / (1024 * 1024):.1f} MB"


# -- sections ---------------------------------------------------------------------------------


def _full(section: Section) -> str:
    if section.posts:
        return "\n".join(post_text(p) for p in section.posts)
    return section.text


def _fit(section: Section, room: int) -> str:
    if section.posts:
        return fit_posts(section.posts, room)
    return fit_text(section.text, room)


def post_text(post: Post, limit: int | None = None) -> str:
    when = f"[{post.at:%Y-%m-%d %H:%M} UTC] " if post.at is not None else ""
    who = f"{post.author} (your own earlier message)" if post.is_keel else post.author
    mark = " ← this request" if post.is_request else ""
    text = post.text if limit is None else fit_text(post.text, limit)
    body = text.strip().replace("\n", "\n  ")
    lines = [f"- {when}{who}{mark}: {body}"]
    lines += [f"  📎 {_describe(f)}" for f in post.files]
    return "\n".join(lines)


def fit_posts(posts: Sequence[Post], room: int) -> str:
    """The first post and the latest that fit, with the number left out between them."""
    # A single message may hold at most a third of the room, so one long paste cannot crowd
    # out the rest of the conversation.
    rendered = [post_text(p, limit=max(room // 3, 200)) for p in posts]
    whole = "\n".join(rendered)
    if len(whole) <= room:
        return whole
    note_room = 60
    kept_head = rendered[:1] if len(rendered[0]) + note_room < room else []
    used = sum(len(r) + 1 for r in kept_head) + note_room
    tail: list[str] = []
    for text in reversed(rendered[len(kept_head) :]):
        if used + len(text) + 1 > room:
            break
        tail.insert(0, text)
        used += len(text) + 1
    omitted = len(rendered) - len(kept_head) - len(tail)
    note = f"- … {omitted} earlier message{'s' if omitted != 1 else ''} omitted …"
    return clip("\n".join([*kept_head, note, *tail]), room)


def fit_text(text: str, room: int) -> str:
    """``text``, or its first lines within ``room`` and how many lines were left out."""
    if len(text) <= room:
        return text
    lines = text.splitlines()
    kept: list[str] = []
    used = 0
    budget = room - 80  # the note below
    for line in lines:
        if used + len(line) + 1 > budget:
            break
        kept.append(line)
        used += len(line) + 1
    if not kept and lines:
        kept = [lines[0][: max(budget, 0)] + "…"]
        omitted_lines = len(lines) - 1
    else:
        omitted_lines = len(lines) - len(kept)
    note = f"… {omitted_lines} more line{'s' if omitted_lines != 1 else ''} omitted"
    return clip("\n".join([*kept, note]), room)


def _short(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"
