"""Where answers go when an objective spans a Slack thread and its pull request, on a real
database with the executor: a follow-up from the pull request gets the answer there too;
a task that began on the pull request leaves one short line in the Slack thread."""

from __future__ import annotations

from pathlib import Path

from runtime.clock import SystemClock
from runtime.reporting import ThreadReporter
from runtime.store import outbox
from runtime.store.records import MailboxPart, SenderPart, TaskStatus
from runtime.threads import GitHubIssue
from tests.factories import THREAD, make_spec, text_part
from tests.harness import build_stack

PULL = GitHubIssue("acme/shop", 7)
SCRIPT = {"scripts": [{"turns": [{"say": "Handled the empty cart; pushed abc123."}]}]}


async def test_review_follow_up_is_answered_on_the_pull_request_when_the_task_began_in_slack(
    db_url: str, tmp_path: Path
) -> None:
    stack = build_stack(db_url, tmp_path, SCRIPT)
    stack.ctx.reporter = ThreadReporter(SystemClock())
    task = (await stack.scheduler.transact(stack.scheduler.schedule, make_spec())).task
    sender = SenderPart(provider="github", name="octo", message=str(PULL.comment(9)))
    parts: list[MailboxPart] = [text_part("handle the empty cart too"), sender]
    await stack.scheduler.transact(
        stack.scheduler.append_mailbox, task.task_id, "github:review:9", parts
    )
    await stack.scheduler.transact(
        stack.scheduler.append_mailbox, task.task_id, "github:review:10", parts
    )
    final = await stack.run_until_terminal(task.task_id)
    posts = await stack.db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    assert final.status is TaskStatus.succeeded
    completions = {p.thread_ref for p in posts if p.purpose == "completion"}
    assert completions == {PULL, THREAD}
    assert not [p for p in posts if p.purpose == "pr_line"]


async def test_slack_thread_gets_one_line_when_a_task_began_on_its_pull_request(
    db_url: str, tmp_path: Path
) -> None:
    stack = build_stack(db_url, tmp_path, SCRIPT)
    stack.ctx.reporter = ThreadReporter(SystemClock())
    spec = make_spec(origin_thread_ref=PULL, objective_key=str(THREAD))
    task = (await stack.scheduler.transact(stack.scheduler.schedule, spec)).task
    await stack.run_until_terminal(task.task_id)
    posts = await stack.db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    [completion] = [p for p in posts if p.purpose == "completion"]
    [line] = [p for p in posts if p.purpose == "pr_line"]
    assert completion.thread_ref == PULL
    assert line.thread_ref == THREAD
    assert line.body == (
        "Updated [PR #7](https://github.com/acme/shop/pull/7) after its review or CI: "
        "Handled the empty cart; pushed abc123."
    )
