"""The task brief of a GitHub request, end to end: an issue comment, a review comment on a
pull request, a failing API, a 5 MB diff; a scripted model's expectations prove what its
first request held."""

from __future__ import annotations

import asyncio
from pathlib import Path

from adapters.emulators.corpus import load_github_example
from adapters.emulators.github_state import PullFile
from runtime.store.records import TaskStatus
from tests.integration.briefs import failure, finished, first_request, script, transcript
from tests.integration.keel_live import GH_REPO, GH_USER, GITHUB_TOKEN, Live, live_keel

HUNK = "@@ -10,4 +10,6 @@ def total(cart):\n     price = 0\n-    return cart['sku']"
PATCH = HUNK + "\n+    return cart.get('sku')\n+    # a missing sku costs nothing"


async def _comment(live: Live, number: int, body: str) -> int:
    """A comment by Codertocat that the webhook then delivers; returns its id."""
    comment_id = live.github.add_comment(GH_REPO, number, body, user=GH_USER)
    url = f"https://github.com/{GH_REPO}/issues/{number}#issuecomment-{comment_id}"
    payload = load_github_example(
        "issue_comment/created",
        **{
            "issue.number": number,
            "comment.id": comment_id,
            "comment.body": body,
            "comment.html_url": url,
        },
    )
    await live.send_github("issue_comment", payload)
    return comment_id


def _issue(live: Live) -> int:
    number = live.github.add_issue(
        GH_REPO,
        "Checkout fails with KeyError 'sku'",
        "Steps: add an item without a sku, open the cart. Traceback in cart.py line 12.",
        user="octocat",
        labels=("bug", "checkout"),
    )
    live.github.add_comment(GH_REPO, number, "Happens on mobile too.", user="octocat")
    return number


async def test_first_request_holds_issue_title_body_number_and_repository_when_asked_on_an_issue(
    db_url: str, tmp_path: Path
) -> None:
    expected = [
        f"Repository: {GH_REPO} (default branch main)",
        "Came from: GitHub issue comment on Codertocat/Hello-World#1",
        "Issue: #1 Checkout fails with KeyError 'sku' (open)",
        "Steps: add an item without a sku, open the cart.",
        "Labels: bug, checkout",
        "octocat: Happens on mobile too.",
        "Codertocat ← this request: @keel please fix this",
        f"Link: https://github.com/{GH_REPO}/issues/1#issuecomment-",
    ]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "on it"})
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        number = _issue(live)
        await _comment(live, number, "@keel please fix this")
        task = await finished(live, f"github:{GH_REPO}#{number}")
        entries = await transcript(live, task.task_id)
    assert task.status is TaskStatus.succeeded, failure(task)
    brief = str(entries[0].payload["text"])
    assert [e.item_key for e in first_request(entries)] == [f"brief:{task.task_id}"]
    assert GITHUB_TOKEN not in brief


async def test_first_request_holds_changed_files_hunk_thread_and_linked_issue_on_a_review_comment(
    db_url: str, tmp_path: Path
) -> None:
    expected = [
        "Pull request: #2 Make the cart tolerate a missing sku (open)",
        "Head: fix-cart at ",
        "Latest check runs on ",
        "tests: failure",
        "M src/cart.py +2 -1",
        "+    return cart.get('sku')",
        "The review comment is on src/cart.py, line 12",
        HUNK,
        "octocat: Why not default the price instead?",
        "Codertocat ← this request: @keel please do what octocat suggests",
        "Linked issues\nCodertocat/Hello-World#1 (issue, open): Checkout fails with KeyError 'sku'",
    ]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "on it"})
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        github = live.github
        issue = _issue(live)
        files = (PullFile("src/cart.py", "modified", 2, 1, PATCH),)
        pull = github.add_pull(
            GH_REPO,
            "Make the cart tolerate a missing sku",
            f"Fixes #{issue}",
            user="octocat",
            head="fix-cart",
            files=files,
        )
        head = github.repos[GH_REPO].pulls[pull].head_sha
        github.set_checks(GH_REPO, head, [("tests", "failure")])
        question = "Why not default the price instead?"
        first = github.add_review_comment(
            GH_REPO, pull, question, user="octocat", path="src/cart.py", line=12, diff_hunk=HUNK
        )
        body = "@keel please do what octocat suggests"
        reply = github.add_review_comment(
            GH_REPO, pull, body, user=GH_USER, path="src/cart.py", line=12, diff_hunk=HUNK,
            in_reply_to=first,
        )
        payload = load_github_example(
            "pull_request_review_comment/created",
            **{"pull_request.number": pull, "comment.id": reply, "comment.body": body},
        )
        await live.send_github("pull_request_review_comment", payload)
        task = await finished(live, f"github:{GH_REPO}#{pull}")
    assert task.status is TaskStatus.succeeded, failure(task)


async def test_task_starts_and_brief_names_the_gap_when_github_answers_500(
    db_url: str, tmp_path: Path
) -> None:
    expected = ["## Could not fetch\n- issue #1: GitHub 500", "(tried 2 times)", "please fix this"]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "started anyway"})
    extra["context"] = {"fetch_attempts": 2}
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        number = _issue(live)
        live.github.inject("issues/get", "500", times=50)
        await _comment(live, number, "@keel please fix this")
        task = await finished(live, f"github:{GH_REPO}#{number}")
    assert task.status is TaskStatus.succeeded, failure(task)
    gets = live.github.requests_to("GET", f"/repos/{GH_REPO}/issues/{number}")
    assert len(gets) == 2


async def test_five_megabyte_diff_is_cut_to_the_bound_with_the_omission_stated(
    db_url: str, tmp_path: Path
) -> None:
    bound = 8000
    expected = ["diff --git a/src/module_00.py", "more lines omitted"]
    extra = script(tmp_path / "s", {"expect_seen": expected, "say": "read it"})
    extra["context"] = {"max_chars": bound}
    hunk = "@@ -1,1 +1,5000 @@\n" + "\n".join(f"+line {n} " + "x" * 12 for n in range(5000))
    files = tuple(
        PullFile(f"src/module_{n:02d}.py", "modified", 5000, 1, hunk) for n in range(50)
    )
    assert sum(len(f.patch or "") for f in files) > 5_000_000
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        pull = live.github.add_pull(
            GH_REPO, "Huge change", user="octocat", head="huge", files=files
        )
        await _comment(live, pull, "@keel please review this")
        task = await finished(live, f"github:{GH_REPO}#{pull}")
        entries = await transcript(live, task.task_id)
    assert task.status is TaskStatus.succeeded, failure(task)
    sent = first_request(entries)
    assert len(sent) == 1 and len(str(sent[0].payload["text"])) <= bound


async def test_follow_up_carries_its_author_and_comment_link_when_it_arrives_mid_run(
    db_url: str, tmp_path: Path
) -> None:
    waits = {"wait_seen": ["<mailbox_update>\nFrom Codertocat (https://github.com/"], "say": "ok"}
    extra = script(tmp_path / "s", waits)
    with live_keel(tmp_path, db_url, workers=True, extra=extra) as live:
        number = _issue(live)
        await _comment(live, number, "@keel please fix this")
        await asyncio.sleep(0.5)
        later = await _comment(live, number, "only on Safari, by the way")
        task = await finished(live, f"github:{GH_REPO}#{number}")
        entries = await transcript(live, task.task_id)
    assert task.status is TaskStatus.succeeded, failure(task)
    [item] = [e for e in entries if e.kind == "mailbox"]
    link = f"https://github.com/{GH_REPO}/issues/{number}#issuecomment-{later}"
    said = "only on Safari, by the way"
    expected = f"<mailbox_update>\nFrom Codertocat ({link}):\n{said}\n</mailbox_update>"
    assert item.payload["text"] == expected
