"""How people answer a task's questions, written once: the words, reactions and buttons that
approve or reject a write, and continue or stop a task at its budget.

Routing reads them to know that a reaction or a click is an answer (and so belongs to the
waiting task); the executor reads them to take the answer. Both import this module, so a word
added here is understood on both sides.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

# The buttons under a question; a click reaches the task as the reply "<button> call=<id>".
APPROVE: Final = "approve"
REJECT: Final = "reject"
CONTINUE: Final = "continue"
ANSWER_BUTTONS: frozenset[str] = frozenset({APPROVE, REJECT, CONTINUE})
# A button's text names the call it answers: "approve call=<call id>".
CALL_MARK = "call="

# Reaction names (Slack shortcodes) that approve, as the reply "approve" would.
APPROVE_REACTIONS: frozenset[str] = frozenset({"white_check_mark", "heavy_check_mark"})
APPROVE_WORDS: frozenset[str] = frozenset(
    {APPROVE, "approved", "✅", *(f":{name}:" for name in APPROVE_REACTIONS)}
)
REJECT_WORDS: frozenset[str] = frozenset({REJECT, "rejected", "deny", "❌", ":x:"})

BudgetAnswer = Literal["continue", "stop"]
BUDGET_WORDS: frozenset[str] = frozenset({CONTINUE, "stop"})

_TRIM = ".!?,:;`*_"


@dataclass(frozen=True, slots=True)
class Approval:
    verdict: Literal["approve", "reject"]
    reason: str = ""


def _words(text: str) -> list[str]:
    """The reply's words, less any mention of us."""
    return [w for w in text.split() if not w.startswith(("<@", "@"))]


def approval_of(text: str, call_id: str) -> Approval | None:
    """``approve`` or ``reject <reason>`` as the reply's first word (after any mention of us);
    a button's ``call=<id>`` must name this call."""
    words = _words(text)
    named = [w for w in words if w.startswith(CALL_MARK)]
    if named and named[0].removeprefix(CALL_MARK) != call_id:
        return None
    words = [w for w in words if not w.startswith(CALL_MARK)]
    first = words[0].lower().strip(_TRIM) if words else ""
    if first in APPROVE_WORDS or (words and words[0] in APPROVE_WORDS):
        return Approval(APPROVE)
    if first in REJECT_WORDS or (words and words[0] in REJECT_WORDS):
        reason = " ".join(words[1:]).lstrip(":-— ").strip()
        return Approval(REJECT, reason)
    return None


def budget_answer_of(text: str) -> BudgetAnswer | None:
    """``continue`` or ``stop`` as the reply's first word (after any mention of us)."""
    words = _words(text.lower())
    first = words[0].strip(_TRIM) if words else ""
    if first == CONTINUE:
        return "continue"
    if first == "stop":
        return "stop"
    return None
