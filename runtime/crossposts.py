"""Where a task's answer goes when its objective spans a chat thread and a pull request.

A task answers its origin. When follow-ups reached it from a pull request it opened (review
comments, failed checks routed by the link), the pull request gets the answer too, once per
pull request; when the task itself began on the pull request (a follow-up after the first
task ended) and its objective is a chat thread, that thread gets one short line saying what
happened on the pull request. Each is an outbox post keyed by the task and the thread.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from runtime.store import mailbox, outbox
from runtime.store.engine import Transaction
from runtime.store.records import MailboxMessage, Task, TaskResult
from runtime.threads import BadThreadRef, GitHubIssue, SlackThread, ThreadRef, parse_thread


def pull_threads(messages: Sequence[MailboxMessage]) -> list[GitHubIssue]:
    """The pull request conversations the follow-ups came from, in order, once each."""
    found: list[GitHubIssue] = []
    for message in messages:
        sender = message.sender
        where = _thread(sender.message if sender else None)
        if isinstance(where, GitHubIssue) and where.root not in found:
            found.append(where.root)
    return found


def objective_thread(task: Task) -> SlackThread | None:
    """The chat thread the task's objective is, if it is one."""
    where = _thread(task.objective_key)
    return where.root if isinstance(where, SlackThread) else None


def enqueue(session: Transaction, task: Task, result: TaskResult, body: str, now: datetime) -> None:
    """The answer on each pull request that followed up, and the short line in chat."""
    origin = task.origin_thread_ref
    if origin is None:
        return
    messages = mailbox.messages_after(session, task.task_id, 0)
    for pull in pull_threads(messages):
        if pull != origin.root:
            outbox.enqueue_post(
                session,
                task_id=task.task_id,
                purpose="completion",
                thread=pull,
                key=f"completion:{task.task_id}:{pull}",
                action="post",
                body=body,
                now=now,
            )
    chat = objective_thread(task)
    if isinstance(origin, GitHubIssue) and chat is not None:
        outbox.enqueue_post(
            session,
            task_id=task.task_id,
            purpose="pr_line",
            thread=chat,
            key=f"pr-line:{task.task_id}",
            action="post",
            body=short_line(origin, result),
            now=now,
        )


def short_line(pull: GitHubIssue, result: TaskResult) -> str:
    summary = next((line for line in result.summary.splitlines() if line.strip()), "")
    if len(summary) > 200:
        summary = summary[:199] + "…"
    url = f"https://github.com/{pull.repo}/pull/{pull.number}"
    verb = "Updated" if result.status.value == "succeeded" else "Could not finish updating"
    return f"{verb} [PR #{pull.number}]({url}) after its review or CI: {summary}"


def _thread(text: object) -> ThreadRef | None:
    if not isinstance(text, str) or not text:
        return None
    try:
        return parse_thread(text)
    except BadThreadRef:
        return None
