"""Fitting a conversation into the model's context window, as a pure function of the
persisted transcript, so a restarted worker builds the same request.

In order, until the estimate fits the budget (a share of the window, minus the reply):
1. the latest summary (a ``summary`` transcript item) stands in for every item it covers,
   except the brief and mailbox items, which are never replaced;
2. old tool results become a stub naming the call, so the model can ask again;
3. if that is not enough, a compaction is planned: the model summarises everything before
   the latest turn and the summary is persisted (``runtime.executor.compaction``);
4. as a last resort (nothing older is left to summarise) the largest texts are cut, so no
   request ever exceeds the bound.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, replace

from runtime.executor import transcript as tx
from runtime.models.base import (
    AssistantText,
    ConversationItem,
    Reasoning,
    ToolCallItem,
    ToolResultItem,
    UserText,
)
from runtime.models.size import item_chars, tokens_of
from runtime.store.transcripts import TranscriptEntry

DEFAULT_CHARS_PER_TOKEN = 4.0
SUMMARY_KIND = "summary"
# A cut item keeps at least this much, head first: enough to say what it was.
_MIN_KEEP_CHARS = 400
_RENDERED_RESULT_CHARS = 2_000


@dataclass(frozen=True, slots=True)
class Window:
    """The model's window in tokens; requests are fitted into ``budget_tokens``."""

    context_window: int = 128_000
    reply_tokens: int = 4_096
    fit_ratio: float = 0.8
    # Assistant turns at the end whose tool results are kept whole: what the model asked
    # for last and has not yet read.
    keep_turns: int = 1

    @property
    def budget_tokens(self) -> int:
        return max(1, int(self.context_window * self.fit_ratio) - self.reply_tokens)


@dataclass(frozen=True, slots=True)
class Compaction:
    """A summary to ask for: of everything up to and including ``through_seq``."""

    through_seq: int
    items: tuple[ConversationItem, ...]


@dataclass(frozen=True, slots=True)
class Fitted:
    items: tuple[ConversationItem, ...]
    tokens: int
    chars: int  # of the whole request: ``runtime.models.size.request_chars`` of it
    elided: int = 0
    cut: int = 0
    compaction: Compaction | None = None


@dataclass(slots=True)
class _Slot:
    entry: TranscriptEntry | None  # None for the summary's stand-in
    item: ConversationItem
    chars: int
    pinned: bool  # the brief and mailbox items: never elided


def fit(
    entries: Sequence[TranscriptEntry],
    *,
    fixed_chars: int,
    window: Window,
    chars_per_token: float = DEFAULT_CHARS_PER_TOKEN,
    force_compaction: bool = False,
) -> Fitted:
    """The request's items for ``entries``; ``fixed_chars`` is the system text and tools."""
    budget_chars = int(window.budget_tokens * chars_per_token) - fixed_chars
    slots, body_start = _view(entries)
    recent = _recent_start(slots, body_start, window.keep_turns)
    if not force_compaction and _total(slots) <= budget_chars:
        return _fitted(slots, chars_per_token, fixed_chars)
    elided = _elide_results(slots, body_start, recent, budget_chars)
    older = [s for s in slots[body_start:recent] if s.entry is not None]
    if older and (force_compaction or _total(slots) > budget_chars):
        plan = _compaction(entries, slots[:body_start], older, budget_chars)
        return _fitted(slots, chars_per_token, fixed_chars, elided=elided, compaction=plan)
    cut = _cut_largest(slots, budget_chars)
    return _fitted(slots, chars_per_token, fixed_chars, elided=elided, cut=cut)


def _fitted(
    slots: list[_Slot],
    ratio: float,
    fixed_chars: int,
    *,
    elided: int = 0,
    cut: int = 0,
    compaction: Compaction | None = None,
) -> Fitted:
    items = tuple(s.item for s in slots)
    chars = fixed_chars + _total(slots)
    return Fitted(items, tokens_of(chars, ratio), chars, elided, cut, compaction)


def latest_summary(entries: Sequence[TranscriptEntry]) -> TranscriptEntry | None:
    return next((e for e in reversed(entries) if e.kind == SUMMARY_KIND), None)


def _view(entries: Sequence[TranscriptEntry]) -> tuple[list[_Slot], int]:
    """The pinned items, the summary's stand-in, then the items after the summary; and
    where those last begin."""
    summary = latest_summary(entries)
    through = int(summary.payload.get("through_seq", 0)) if summary else 0
    head: list[_Slot] = []
    body: list[_Slot] = []
    for entry in entries:
        item = tx.to_item(entry.payload)
        if item is None or entry.kind == SUMMARY_KIND:
            continue
        pinned = entry.kind in ("brief", "mailbox")
        if pinned and (entry.kind == "brief" or entry.seq <= through):
            head.append(_Slot(entry, item, item_chars(item), True))
        elif entry.seq > through:
            body.append(_Slot(entry, item, item_chars(item), False))
    if summary is not None:
        stand_in = UserText(summary_text(str(summary.payload.get("text", ""))))
        head.append(_Slot(None, stand_in, item_chars(stand_in), True))
    return head + body, len(head)


def summary_text(text: str) -> str:
    return f"<summary_of_earlier_work>\n{text}\n</summary_of_earlier_work>"


def _recent_start(slots: list[_Slot], body_start: int, keep_turns: int) -> int:
    """Index of the first slot of the last ``keep_turns`` assistant turns."""
    starts = [
        i
        for i in range(body_start, len(slots))
        if _is_assistant(slots[i]) and (i == body_start or not _is_assistant(slots[i - 1]))
    ]
    if len(starts) < keep_turns or keep_turns <= 0:
        return body_start if keep_turns > 0 else len(slots)
    return starts[-keep_turns]


def _is_assistant(slot: _Slot) -> bool:
    return isinstance(slot.item, AssistantText | Reasoning | ToolCallItem)


def _total(slots: list[_Slot]) -> int:
    return sum(s.chars for s in slots)


def _elide_results(slots: list[_Slot], start: int, end: int, budget_chars: int) -> int:
    """Stub tool results in ``slots[start:end]``, oldest first, until the view fits."""
    calls = {
        s.item.call_id: s.item for s in slots if isinstance(s.item, ToolCallItem)
    }
    total, elided = _total(slots), 0
    for slot in slots[start:end]:
        if total <= budget_chars:
            break
        item = slot.item
        if not isinstance(item, ToolResultItem) or len(item.output) <= _MIN_KEEP_CHARS:
            continue
        stub = ToolResultItem(item.call_id, elision_stub(calls.get(item.call_id), item), False)
        total -= slot.chars
        slot.item, slot.chars = stub, item_chars(stub)
        total += slot.chars
        elided += 1
    return elided


def elision_stub(call: ToolCallItem | None, result: ToolResultItem) -> str:
    what = f"{call.name} {_brief_args(call)}".rstrip() if call else "this tool call"
    failed = " (it failed)" if result.is_error else ""
    return (
        f"[output of {what}{failed} elided to fit the context window "
        f"({len(result.output)} characters); call it again if you need it]"
    )


def _brief_args(call: ToolCallItem) -> str:
    text = " ".join(
        f"{k}={json.dumps(v, ensure_ascii=False)}" for k, v in sorted(call.arguments.items())
    )
    return text if len(text) <= 160 else text[:157] + "..."


def _cut_largest(slots: list[_Slot], budget_chars: int) -> int:
    """Cut the largest texts (the brief and mailbox last) until the view fits."""
    cut = 0
    order = sorted(range(len(slots)), key=lambda i: (slots[i].pinned, -slots[i].chars))
    for index in order:
        excess = _total(slots) - budget_chars
        if excess <= 0:
            break
        slot = slots[index]
        shorter = _shortened(slot.item, excess)
        if shorter is not None:
            slot.item, slot.chars = shorter, item_chars(shorter)
            cut += 1
    return cut


def _shortened(item: ConversationItem, excess: int) -> ConversationItem | None:
    text = _text(item)
    if text is None or len(text) <= _MIN_KEEP_CHARS:
        return None
    keep = max(_MIN_KEEP_CHARS, len(text) - excess - 120)
    note = f"\n[... {len(text) - keep} characters cut to fit the context window]"
    shorter = text[:keep] + note
    match item:
        case ToolResultItem():
            return replace(item, output=shorter)
        case UserText() | AssistantText() | Reasoning():
            return replace(item, text=shorter)
    return None


def _text(item: ConversationItem) -> str | None:
    match item:
        case ToolResultItem(output=output):
            return output
        case UserText(text=text) | AssistantText(text=text) | Reasoning(text=text):
            return text
    return None


# -- what a compaction summarises -----------------------------------------------------------


def _compaction(
    entries: Sequence[TranscriptEntry],
    head: list[_Slot],
    older: list[_Slot],
    budget_chars: int,
) -> Compaction:
    """The items to summarise as plain text (no tool-call pairing to keep), newest kept
    when they must be cut: the previous summary and the brief come first."""
    through = max(s.entry.seq for s in older if s.entry is not None)
    lead = [s.item for s in head]
    room = budget_chars - sum(item_chars(i) for i in lead) - 200
    lines = [_rendered(s.item) for s in older]
    text = "\n".join(lines)
    if len(text) > room:
        keep = max(room, _MIN_KEEP_CHARS)
        text = f"[... {len(text) - keep} earlier characters cut]\n" + text[-keep:]
    history = UserText(f"<work_to_summarise>\n{text}\n</work_to_summarise>")
    return Compaction(through, (*lead, history))


def _rendered(item: ConversationItem) -> str:
    match item:
        case ToolCallItem(name=name):
            return f"assistant called {name} {_brief_args(item)}"
        case ToolResultItem(output=output, is_error=is_error):
            shown = output[:_RENDERED_RESULT_CHARS]
            more = f" [... {len(output) - len(shown)} more characters]" if shown != output else ""
            return f"tool {'error' if is_error else 'result'}: {shown}{more}"
        case AssistantText(text=text):
            return f"assistant: {text}"
        case Reasoning(text=text):
            return f"assistant (reasoning): {text}"
        case UserText(text=text):
            return f"user: {text}"
