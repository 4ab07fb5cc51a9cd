"""GitHub requests end to end (real Keel, real PyGithub, the emulator, real payloads): 👀 on
what asked, authorisation off the request path and never silent, the extra triggers, and
the catch-up of deliveries missed while Keel was away."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import select

from adapters.assembly import Keel
from adapters.emulators.corpus import load_github_example
from adapters.emulators.github_state import GitHubState
from runtime.store.engine import Database
from runtime.store.models import SignalRow
from tests.factories import app_key_pair, github_app_settings
from tests.integration.keel_live import GH_REPO, GH_USER, WEBHOOK_SECRET, Live, live_keel

BOT = "keel-bot"  # live_keel's bot login (token auth)
PERMISSION = "repos/get-collaborator-permission-level"


async def _until(check: Callable[[], Any], timeout: float = 20.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if asyncio.iscoroutine(found):
            found = await found
        if found:
            return found
        await asyncio.sleep(0.05)
    raise AssertionError("condition not met in time")


async def _signals(live: Live) -> list[SignalRow]:
    db = Database.from_url(live.db_url)
    try:
        return await db.read(lambda s: list(s.scalars(select(SignalRow))))
    finally:
        db.close()


def _keel(live: Live) -> Keel:
    keel: Keel = live.app.state.keel
    return keel


def _fast_retries(live: Live) -> None:
    intake = _keel(live).held
    assert intake is not None
    intake.retry_delays_s = (0.05, 0.05)


async def _comment(
    live: Live, number: int, body: str, *, user: str = GH_USER, delivery_id: str | None = None
) -> int:
    comment_id = live.github.add_comment(GH_REPO, number, body, user=user)
    payload = load_github_example(
        "issue_comment/created",
        **{
            "issue.number": number,
            "comment.id": comment_id,
            "comment.body": body,
            "comment.user.login": user,
            "sender.login": user,
        },
    )
    await live.send_github("issue_comment", payload, delivery_id=delivery_id)
    return comment_id


def _bot_comments(github: GitHubState, number: int, containing: str) -> list[str]:
    repo = github.repos[GH_REPO]
    return [
        c.body
        for cid in repo.issues[number].comment_ids
        if containing in (c := repo.comments[cid]).body
    ]


# -- 👀 on what asked ---------------------------------------------------------------------


async def test_eyes_land_on_the_issue_comment_review_comment_and_review_that_asked(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url) as live:
        github = live.github
        issue = github.add_issue(GH_REPO, "Cart breaks", "KeyError", user="octocat")
        comment = await _comment(live, issue, "@keel please look")
        pull = github.add_pull(GH_REPO, "Fix cart", user="octocat", head="fix-cart")
        review_comment = github.add_review_comment(
            GH_REPO, pull, "@keel why this?", user=GH_USER, path="a.py", line=1, diff_hunk="@@"
        )
        await live.send_github(
            "pull_request_review_comment",
            load_github_example(
                "pull_request_review_comment/created",
                **{
                    "pull_request.number": pull,
                    "comment.id": review_comment,
                    "comment.body": "@keel why this?",
                },
            ),
        )
        other_pull = github.add_pull(GH_REPO, "Docs", user="octocat", head="docs")
        await live.send_github(
            "pull_request_review",
            load_github_example(
                "pull_request_review/submitted",
                **{"pull_request.number": other_pull, "review.body": "@keel tidy this up"},
            ),
        )
        repo = github.repos[GH_REPO]

        def subjects() -> set[tuple[str, int]]:
            return {r.subject for r in repo.reactions if r.content == "eyes"}

        wanted = {("comment", comment), ("review_comment", review_comment), ("issue", other_pull)}
        await _until(lambda: wanted <= subjects())
        # Never on the issue or pull request itself when a comment asked.
        assert ("issue", issue) not in subjects() and ("issue", pull) not in subjects()


# -- authorisation ----------------------------------------------------------------------------


async def test_a_failing_permission_lookup_is_retried_then_answered_visibly(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url) as live:
        _fast_retries(live)
        github = live.github
        github.inject(PERMISSION, "500", times=3)
        issue = github.add_issue(GH_REPO, "Flaky", "", user="octocat")

        await _comment(live, issue, "@keel fix it")

        reply = await _until(lambda: _bot_comments(github, issue, "could not verify"))
        path = f"/repos/{GH_REPO}/collaborators/{GH_USER}/permission"
        assert len(github.requests_to("GET", path)) == 3  # tried, retried, retried
        [signal] = await _signals(live)
        assert (signal.decision, signal.reason) == ("drop", "unauthorised")
        assert len(reply) == 1 and GH_USER in reply[0]


async def test_a_request_is_routed_before_the_answer_when_a_recent_lookup_let_its_asker_in(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url) as live:
        github = live.github
        first, second = (github.add_issue(GH_REPO, t, "", user="octocat") for t in "AB")
        await _comment(live, first, "@keel fix it")
        await live.drained()  # looked up, routed and released
        intake = _keel(live).held
        assert intake is not None
        intake.max_in_flight = 0  # from here on, a held delivery would stay held

        comment = await _comment(live, second, "@keel and this", delivery_id="guid-again")

        # Routed before the answer: nothing held, the task started, no second lookup.
        counts = await live.counts()
        assert (counts["held"], counts["signals"], counts["tasks"]) == (0, 2, 2)
        path = f"/repos/{GH_REPO}/collaborators/{GH_USER}/permission"
        assert len(github.requests_to("GET", path)) == 1
        await live.send_github(
            "issue_comment",
            load_github_example(
                "issue_comment/created",
                **{"issue.number": second, "comment.id": comment, "comment.body": "@keel and this"},
            ),
            delivery_id="guid-again",
        )
        assert (await live.counts())["signals"] == 2  # the redelivery is the same signal
        repo = github.repos[GH_REPO]

        def eyes() -> list[tuple[str, int]]:
            return [r.subject for r in repo.reactions if r.content == "eyes"]

        await _until(lambda: ("comment", comment) in eyes())
        await asyncio.sleep(0.3)
        assert eyes().count(("comment", comment)) == 1


async def test_a_maintainer_passes_min_permission_maintain_and_a_writer_is_refused_once(
    db_url: str, tmp_path: Path
) -> None:
    extra = {"github": {"min_permission": "maintain"}}
    with live_keel(tmp_path, db_url, extra=extra) as live:
        github = live.github
        github.set_permission(GH_REPO, "mia", "maintain")
        github.set_permission(GH_REPO, "wes", "write")
        issue = github.add_issue(GH_REPO, "Bump deps", "", user="octocat")
        other = github.add_issue(GH_REPO, "Bump more", "", user="octocat")

        await _comment(live, issue, "@keel bump them", user="mia")
        await _comment(live, other, "@keel bump them", user="wes")
        await _comment(live, other, "@keel please?", user="wes")

        async def decided() -> list[tuple[str, str | None]] | None:
            found = sorted((s.decision, s.reason) for s in await _signals(live))
            return found if len(found) == 3 else None

        decisions = await _until(decided)
        assert decisions == [
            ("drop", "unauthorised"),
            ("drop", "unauthorised"),
            ("new_task", None),
        ]
        refusals = await _until(lambda: _bot_comments(github, other, "Sorry wes"))
        await asyncio.sleep(0.5)
        assert len(_bot_comments(github, other, "Sorry wes")) == len(refusals) == 1
        assert "maintain" in refusals[0]
        assert _bot_comments(github, issue, "Sorry") == []


async def test_an_unauthorised_request_gets_no_reply_when_configured_silent(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url, extra={"github": {"unauthorised": "silent"}}) as live:
        github = live.github
        github.set_permission(GH_REPO, "rita", "read")
        issue = github.add_issue(GH_REPO, "Typo", "", user="octocat")

        await _comment(live, issue, "@keel fix the typo", user="rita")

        async def dropped() -> bool:
            return any(s.reason == "unauthorised" for s in await _signals(live))

        await _until(dropped)
        await asyncio.sleep(0.3)
        assert _bot_comments(github, issue, "Sorry") == []


# -- triggers ---------------------------------------------------------------------------------


async def test_assigned_labelled_and_review_triggers_start_one_task_each_even_when_redelivered(
    db_url: str, tmp_path: Path
) -> None:
    with live_keel(tmp_path, db_url, extra={"github": {"trigger_label": "keel"}}) as live:
        github = live.github
        assigned = github.add_issue(GH_REPO, "Assign me", "", user="octocat")
        labelled = github.add_issue(GH_REPO, "Label me", "", user="octocat")
        pull = github.add_pull(GH_REPO, "Review me", user="octocat", head="review-me")
        deliveries = [
            (
                "issues",
                load_github_example(
                    "issues/assigned",
                    **{"issue.number": assigned, "assignee.login": BOT, "assignee.type": "User"},
                ),
            ),
            (
                "issues",
                load_github_example(
                    "issues/labeled", **{"issue.number": labelled, "label.name": "keel"}
                ),
            ),
            (
                "pull_request_review",
                load_github_example(
                    "pull_request_review/submitted",
                    **{"pull_request.number": pull, "review.body": "@keel address these"},
                ),
            ),
            # Not requests: assigned to someone else, another label.
            (
                "issues",
                load_github_example("issues/assigned", **{"issue.number": assigned}),
            ),
            (
                "issues",
                load_github_example("issues/labeled", **{"issue.number": labelled}),
            ),
        ]
        for number, (event, payload) in enumerate(deliveries):
            # Each delivered twice with its GUID, as a redelivery would.
            await live.send_github(event, payload, delivery_id=f"guid-{number}", times=2)

        async def routed() -> list[SignalRow] | None:
            found = await _signals(live)
            return found if len(found) == len(deliveries) else None

        signals = await _until(routed)
        started = sorted(s.objective_key or "" for s in signals if s.decision == "new_task")
        assert started == sorted(
            f"github:{GH_REPO}#{n}" for n in (assigned, labelled, pull)
        )
        assert sorted(s.reason or "" for s in signals if s.decision == "drop") == [
            "not_addressed",
            "not_addressed",
        ]
        counts = await live.counts()
        assert counts["tasks"] == 3


# -- catch-up of missed deliveries ------------------------------------------------------------


@pytest.fixture(scope="module")
def app_key() -> tuple[str, str]:
    return app_key_pair()


async def test_deliveries_missed_while_keel_was_down_are_redelivered_once_each_one_signal(
    db_url: str, tmp_path: Path, app_key: tuple[str, str]
) -> None:
    extra = github_app_settings(app_key[0])
    an_hour_ago = time.time() - 3600
    # The catch-up job runs at start and then every 0.2 s.
    extra["github"]["catch_up_interval_s"] = 0.2
    with live_keel(tmp_path, db_url, extra=extra, app_public_key=app_key[1]) as live:
        github = live.github
        hooks = github.hooks
        hooks.secret = WEBHOOK_SECRET
        issues = [github.add_issue(GH_REPO, f"Missed {n}", "", user="octocat") for n in range(4)]

        def comment(number: int) -> dict[str, Any]:
            cid = github.add_comment(GH_REPO, number, "@keel have a look", user=GH_USER)
            return load_github_example(
                "issue_comment/created",
                **{"issue.number": number, "comment.id": cid, "comment.body": "@keel look"},
            )

        # Keel is away: three deliveries fail (nothing answers), an hour ago.
        hooks.url = None
        missed = [
            await hooks.send("issue_comment", comment(n), delivered_at=an_hour_ago + n)
            for n in issues[:3]
        ]
        assert [d.status_code for d in missed] == [0, 0, 0]
        # One delivery landed normally: it is never asked for again.
        hooks.url = live.url + "/github/webhook"
        landed = await hooks.send("issue_comment", comment(issues[3]), delivered_at=an_hour_ago)
        assert landed.status_code == 200

        async def routed() -> list[SignalRow] | None:
            found = await _signals(live)
            return found if len(found) == 4 else None

        signals = await _until(routed)
        assert sorted(s.delivery_id for s in signals) == sorted(
            [d.guid for d in missed] + [landed.guid]
        )
        assert all(s.decision == "new_task" for s in signals)
        await asyncio.sleep(1.0)  # several more passes: none asks again
        assert sorted(hooks.redelivery_requests) == sorted(d.delivery_id for d in missed)
        redelivered = [d for d in hooks.deliveries if d.redelivery]
        assert sorted(d.guid for d in redelivered) == sorted(d.guid for d in missed)
        metrics = _keel(live).metrics
        assert metrics.registry.get_sample_value("keel_github_redeliveries_requested_total") == 3
