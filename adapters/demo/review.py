"""The demo's review step: dana opens a pull request of her own and asks Keel to review it.

The request is a signed ``pull_request.review_requested`` webhook naming ``keel-bot`` (sent
twice, as a redelivery would be); Keel runs one read-only review task, whose scripted model
submits one review with an inline comment on a line of the diff; the step then shows the
review as GitHub has it, and Keel's reply on the pull request with the review read back.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from adapters.emulators.corpus import load_github_example
from adapters.emulators.github_state import GitHubState, IssueComment, PullFile
from adapters.emulators.webhooks import deliver, sign_github
from runtime.store import tasks as q
from runtime.store.engine import Database

PERSON = "dana"
TITLE = "Add mul()"
# calc.py of the sample gains mul(), which multiplies a by itself: the finding on line 9.
PATCH = (
    "@@ -4,2 +4,6 @@\n def add(a: int, b: int) -> int:\n     return a - b\n"
    "+\n+\n+def mul(a: int, b: int) -> int:\n+    return a * a\n"
)

Echo = Callable[[str], None]


async def review_step(
    keel_url: str,
    db_url: str,
    github: GitHubState,
    *,
    repo: str,
    webhook_secret: str,
    echo: Echo,
    timeout_s: float = 60,
) -> list[str]:
    """Run the step; the problems found (none when the review landed as it should)."""
    github.set_permission(repo, PERSON, "write")
    files = (PullFile("calc.py", "modified", 4, 0, PATCH),)
    number = github.add_pull(repo, TITLE, user=PERSON, head="dana/mul", files=files)
    head = github.repos[repo].pulls[number].head_sha
    echo(f"\ndana opens pull request #{number} ({TITLE}) and asks keel-bot for a review")
    payload = load_github_example(
        "pull_request/review_requested",
        **{
            "repository.full_name": repo,
            "repository.name": repo.split("/")[1],
            "repository.owner.login": repo.split("/")[0],
            "pull_request.number": number,
            "pull_request.title": TITLE,
            "pull_request.head.sha": head,
            "requested_reviewer.login": "keel-bot",
            "sender.login": PERSON,
        },
    )
    signed = sign_github("pull_request", payload, webhook_secret, delivery_id=f"demo-rr-{number}")
    await deliver(keel_url + "/github/webhook", signed, times=2)
    if not await _replied(github, repo, number, timeout_s):
        return [f"no review reply on pull request #{number} within {timeout_s:g}s"]
    _show(github, repo, number, echo)
    return await _check(github, repo, number, head, db_url)


async def _replied(github: GitHubState, repo: str, number: int, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if any("Review read back" in c.body for c in _comments(github, repo, number)):
            return True
        await asyncio.sleep(0.2)
    return False


def _comments(github: GitHubState, repo: str, number: int) -> list[IssueComment]:
    found = github.repos[repo]
    return [found.comments[i] for i in found.issues[number].comment_ids]


def _show(github: GitHubState, repo: str, number: int, echo: Echo) -> None:
    echo(f"──── pull request #{number}, as a person sees it ────")
    for review in github.reviews_of(repo, number):
        echo(f"{review.user.login} reviewed ({review.state}): {_visible(review.body)}")
        for inline in github.repos[repo].review_comments.values():
            if inline.review_id == review.review_id:
                echo(f"  {inline.path}:{inline.line}  {inline.body}")
    for comment in _comments(github, repo, number):
        echo(f"{comment.user.login}: {_visible(comment.body)}")
    echo("───────────────────────────────────────────────")


def _visible(body: str) -> str:
    """A body as GitHub renders it: without Keel's hidden markers."""
    return "\n".join(line for line in body.splitlines() if not line.startswith("<!--")).strip()


async def _check(github: GitHubState, repo: str, number: int, head: str, db_url: str) -> list[str]:
    problems = []
    reviews = github.reviews_of(repo, number)
    if len(reviews) != 1 or reviews[0].commit_id != head:
        problems.append(f"expected one review of {head[:7]}, found {len(reviews)}")
    inline = [c for c in github.repos[repo].review_comments.values() if c.pull_number == number]
    if [(c.path, c.line) for c in inline] != [("calc.py", 9)]:
        problems.append(f"expected one inline comment on calc.py:9, found {len(inline)}")
    db = Database.from_url(db_url)
    try:
        task = await db.read(lambda s: q.latest_by_objective(s, f"github:{repo}#{number}"))
    finally:
        db.close()
    if task is None or task.agent != "review" or task.status != "succeeded":
        problems.append(f"the review task did not succeed as the review agent: {task}")
    return problems
