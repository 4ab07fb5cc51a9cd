"""The brief's text: its labelled layout and the size bound, whatever the input."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from runtime.brief.model import Download, FileRef, Gathered, Post, Section
from runtime.brief.render import FileNote, fit_posts, fit_text, render, shares

AT = datetime(2026, 12, 5, 10, 30, tzinfo=UTC)


def _brief(**overrides: Any) -> Gathered:
    base = Gathered(
        facts=(("Requested by", "Dana"), ("Came from", "Slack, #general")),
        request="can you fix this?",
        sections=(Section("Slack thread", posts=(Post("Alice", "checkout is broken", AT),)),),
    )
    return replace(base, **overrides)


def test_layout_is_labelled_and_stable_when_everything_fits() -> None:
    text = render(_brief(missing=("the channel's name: missing_scope",)), {}, 10_000)

    assert text == (
        "# Task brief\nRequested by: Dana\nCame from: Slack, #general\n\n"
        "## Request\ncan you fix this?\n\n"
        "## Slack thread\n- [2026-12-05 10:30 UTC] Alice: checkout is broken\n\n"
        "## Could not fetch\n- the channel's name: missing_scope"
    )


def test_thread_keeps_first_and_latest_messages_and_counts_the_rest_when_too_long() -> None:
    posts = tuple(Post("Alice", f"message {n}: " + "x" * 100, AT) for n in range(500))

    text = fit_posts(posts, 2_000)

    assert len(text) <= 2_000
    assert text.startswith("- [2026-12-05 10:30 UTC] Alice: message 0:")
    assert "message 499:" in text and "message 250:" not in text
    kept = text.count("\n- [") + 1
    assert f"… {500 - kept} earlier messages omitted …" in text


def test_text_keeps_its_first_lines_and_says_how_many_more_when_too_long() -> None:
    diff = "\n".join(f"+line {n}" for n in range(100_000))

    text = fit_text(diff, 1_000)

    assert len(text) <= 1_000 and text.startswith("+line 0\n+line 1\n")
    assert text.endswith("more lines omitted") and "+line 99999" not in text


def test_one_long_message_cannot_crowd_out_the_others() -> None:
    posts = (Post("Bob", "y" * 50_000, AT), Post("Alice", "the short one", AT))

    text = fit_posts(posts, 3_000)

    assert "the short one" in text and len(text) <= 3_000


def test_shares_give_small_parts_what_they_need_and_split_the_rest() -> None:
    assert shares([100, 5_000, 5_000], 3_100) == [100, 1_500, 1_500]
    assert shares([10, 20], 1_000) == [10, 20]


def test_files_say_where_they_were_saved_or_why_not() -> None:
    image = FileRef("F1", "shot.png", "image/png", 2048)
    binary = FileRef("F2", "core.bin", "application/octet-stream", 10)
    brief = _brief(
        downloads=(
            Download(image, b"png"),
            Download(binary, None, "not downloaded: neither a text file nor an image"),
        )
    )
    notes = {
        "F1": FileNote(saved_as=".keel/files/F1-shot.png", shown=True),
        "F2": FileNote(note="not downloaded: neither a text file nor an image"),
    }

    text = render(brief, notes, 10_000)

    assert (
        "- shot.png (image/png, 2.0 KB): saved in the workspace as .keel/files/F1-shot.png; "
        "shown to you as an image" in text
    )
    assert "- core.bin (application/octet-stream, 10 B): not downloaded: neither" in text


@settings(max_examples=60, deadline=None)
@given(
    bound=st.integers(min_value=2_000, max_value=20_000),
    posts=st.lists(st.text(max_size=3_000), max_size=60),
    body=st.text(max_size=40_000),
    request=st.text(max_size=30_000),
    facts=st.lists(st.tuples(st.text(max_size=30), st.text(max_size=2_000)), max_size=12),
    missing=st.lists(st.text(max_size=1_000), max_size=40),
)
def test_brief_never_exceeds_the_bound_whatever_the_input(
    bound: int,
    posts: list[str],
    body: str,
    request: str,
    facts: list[tuple[str, str]],
    missing: list[str],
) -> None:
    brief = Gathered(
        facts=tuple(facts),
        request=request,
        sections=(
            Section("Thread", posts=tuple(Post("A", p, AT) for p in posts)),
            Section("Diff", body),
        ),
        missing=tuple(missing),
    )

    assert len(render(brief, {}, bound)) <= bound
