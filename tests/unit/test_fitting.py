"""Fitting a transcript into a window: what is elided, what never is, and when a compaction
is planned; and the price of a call."""

from __future__ import annotations

import math
from datetime import UTC, datetime
from typing import Any

from runtime.config import ModelPrice
from runtime.executor.accounting import Accounting
from runtime.executor.fitting import Window, fit
from runtime.models.base import ModelRequest, ToolResultItem, ToolSpec, Usage, UserText
from runtime.models.size import item_chars, request_chars, tools_chars
from runtime.store.transcripts import TranscriptEntry

NOW = datetime(2026, 12, 6, tzinfo=UTC)
WINDOW = Window(context_window=2_000, reply_tokens=200)  # 1,400 tokens: 5,600 characters


def make_transcript(turns: int, size: int, *, brief: str = "fix the cart") -> list[TranscriptEntry]:
    entries: list[TranscriptEntry] = []

    def add(key: str, role: str, kind: str, payload: dict[str, Any]) -> None:
        entries.append(TranscriptEntry(len(entries) + 1, key, role, kind, payload, NOW))

    add("brief:t", "user", "brief", {"type": "user_text", "text": brief})
    for turn in range(turns):
        call = f"call_{turn}_0"
        add(
            f"call:{call}",
            "assistant",
            "tool_call",
            {
                "type": "tool_call",
                "call_id": call,
                "name": "read_file",
                "arguments": {"path": f"src/p{turn}.py"},
            },
        )
        add(
            f"result:{call}",
            "tool",
            "tool_result",
            {"type": "tool_result", "call_id": call, "output": f"{turn}" * size},
        )
        if turn == 0:
            add("mbx:m1", "user", "mailbox", {"type": "user_text", "text": "also the docs"})
    return entries


def chars(items: Any) -> int:
    return sum(item_chars(i) for i in items)


def test_everything_is_sent_whole_when_it_fits() -> None:
    fitted = fit(make_transcript(2, 500), fixed_chars=0, window=WINDOW)
    assert fitted.compaction is None and fitted.elided == fitted.cut == 0
    assert len(fitted.items) == 6


def test_old_results_become_stubs_naming_the_call_and_the_latest_stays_whole_when_too_big() -> None:
    fitted = fit(make_transcript(4, 1_500), fixed_chars=0, window=WINDOW)
    assert fitted.compaction is None and fitted.elided >= 1
    results = [i for i in fitted.items if isinstance(i, ToolResultItem)]
    assert 'output of read_file path="src/p0.py" elided' in results[0].output
    assert results[-1].output == "3" * 1_500
    assert math.ceil(chars(fitted.items) / 4) <= WINDOW.budget_tokens


def test_a_compaction_is_planned_for_the_older_turns_when_stubs_are_not_enough() -> None:
    entries = make_transcript(60, 1_000)
    fitted = fit(entries, fixed_chars=0, window=WINDOW)
    assert fitted.compaction is not None
    last_call = next(e for e in reversed(entries) if e.kind == "tool_call")
    assert fitted.compaction.through_seq == last_call.seq - 1
    assert chars(fitted.compaction.items) <= WINDOW.budget_tokens * 4


def test_the_summary_stands_in_for_older_items_but_the_brief_and_mailbox_stay() -> None:
    entries = make_transcript(60, 1_000)
    plan = fit(entries, fixed_chars=0, window=WINDOW).compaction
    assert plan is not None
    summary = {"type": "summary", "text": "did 59 reads", "through_seq": plan.through_seq}
    entries.append(TranscriptEntry(len(entries) + 1, "compact:x", "user", "summary", summary, NOW))
    fitted = fit(entries, fixed_chars=0, window=WINDOW)
    texts = [i.text for i in fitted.items if isinstance(i, UserText)]
    assert texts[0] == "fix the cart" and texts[1] == "also the docs"
    assert "did 59 reads" in texts[2]
    assert fitted.compaction is None
    assert math.ceil(chars(fitted.items) / 4) <= WINDOW.budget_tokens


def test_a_forced_compaction_is_planned_even_when_the_estimate_fits() -> None:
    fitted = fit(make_transcript(3, 100), fixed_chars=0, window=WINDOW, force_compaction=True)
    assert fitted.compaction is not None


def test_the_largest_texts_are_cut_when_nothing_older_is_left_to_summarise() -> None:
    entries = make_transcript(1, 30_000, brief="b" * 3_000)
    fitted = fit(entries, fixed_chars=0, window=WINDOW)
    assert fitted.compaction is None and fitted.cut >= 1
    assert math.ceil(chars(fitted.items) / 4) <= WINDOW.budget_tokens
    assert fitted.items[0] == UserText("b" * 3_000)  # the brief is cut last


def test_the_fitted_size_is_the_size_of_the_request_it_makes() -> None:
    """The character count the provider's usage calibrates against is the request's own,
    whole, with stubs, or cut."""
    tools = (ToolSpec("read_file", "reads a file", {"type": "object", "properties": {}}),)
    fixed = len("sys") + tools_chars(tools)
    cases = [
        make_transcript(2, 500),  # whole
        make_transcript(4, 1_500),  # old results stubbed
        make_transcript(1, 30_000, brief="b" * 3_000),  # cut
    ]
    seen = set()
    for entries in cases:
        fitted = fit(entries, fixed_chars=fixed, window=WINDOW)
        request = ModelRequest("t", 0, "sys", fitted.items, tools, max_tokens=200)
        assert fitted.chars == request_chars(request)
        seen.add((fitted.elided > 0, fitted.cut > 0))
    assert seen == {(False, False), (True, False), (False, True)}


def test_fitting_is_the_same_every_time_when_the_transcript_is() -> None:
    entries = make_transcript(60, 1_000)
    assert fit(entries, fixed_chars=100, window=WINDOW) == fit(
        entries, fixed_chars=100, window=WINDOW
    )


def test_cost_uses_the_cached_price_for_cached_prompt_tokens_when_configured() -> None:
    price = ModelPrice(input_per_million=2.0, output_per_million=8.0, cached_input_per_million=1.0)
    accounting = Accounting("m", {"m": price})
    cost = accounting.cost_usd(Usage(prompt_tokens=1_000, completion_tokens=100, cached_tokens=400))
    assert math.isclose(cost, (600 * 2.0 + 400 * 1.0 + 100 * 8.0) / 1e6)
    assert Accounting("other", {"m": price}).cost_usd(Usage(1_000, 100)) == 0.0
