"""Where a Signal belongs, from Keel's own records: the thread a reacted-to message sits in,
and the objective of a pull request or commit a task made."""

from __future__ import annotations

from dataclasses import replace

from routing.signal import FAILED_CONCLUSIONS, Signal, slack_message_fact
from runtime.store import links
from runtime.store import signals as store
from runtime.store.engine import Database
from runtime.threads import GitHubCommit, GitHubIssue, SlackThread


async def in_its_thread(db: Database, signal: Signal) -> Signal:
    """A reaction or click names one message, which may be anywhere in a thread (the
    mention, our progress message): it acts on the thread that message belongs to."""
    item = signal.message or signal.thread_ref
    if signal.kind not in ("reaction", "action") or not isinstance(item, SlackThread):
        return signal
    fact = slack_message_fact(item.team, item.channel, item.target_ts)
    owner = await db.read(lambda s: store.owner_of_message(s, item, fact))
    thread = owner[1].root if owner is not None else None
    if owner is None or not isinstance(thread, SlackThread):
        return signal  # the root itself, or a message Keel knows nothing of
    return replace(
        signal,
        objective_key=owner[0],
        thread_ref=thread,
        message=thread.message(item.target_ts),
    )


async def in_its_objective(db: Database, signal: Signal) -> Signal:
    """A pull request a task opened, or a check on its current head, belongs to that
    task's objective. A check's fact is (check, head SHA): one follow-up per failing
    check and commit, however often it fails again there."""
    thread = signal.thread_ref
    match thread:
        case GitHubIssue(repo=repo, number=number):
            link = await db.read(lambda s: links.pull_link(s, repo, number))
        case GitHubCommit(repo=repo, sha=sha) if signal.ci is not None:
            link = await db.read(lambda s: links.link_of_head(s, repo, sha))
        case _:
            link = None
    if link is None:
        return signal
    pull = GitHubIssue(link.repo, link.number)
    linked = replace(signal, objective_key=link.objective_key, linked=pull)
    if signal.ci is not None:
        # Nobody can reply on a commit: the check's answers go to its pull request.
        linked = replace(linked, thread_ref=pull)
    if signal.ci is not None and signal.ci.conclusion in FAILED_CONCLUSIONS:
        fact = f"github:ci:{thread}:{signal.ci.name}:failed"
        linked = replace(linked, dedupe_key=fact)
    return linked
