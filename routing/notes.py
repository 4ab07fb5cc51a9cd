"""What the thread is told about a Signal, queued in the transaction that decides it: the 👀 of
an accepted signal (🛑 for a stop), and the three posts written as prose (an escalation, the
CI cap, a refused ``continue``). The two answers to a held request that routing turned away
(its asker's permission unknown, or too low) are written here too; ``routing/held.py`` posts
them after the decision, found again by their marker."""

from __future__ import annotations

from datetime import datetime

from routing.repos import named_in, repo_refused_text
from routing.result import ACKNOWLEDGED, IngestResult
from routing.signal import Signal
from runtime.answers import CONTINUE, budget_answer_of
from runtime.reporting import ReportingPolicy, enqueue_ack
from runtime.store.engine import Transaction
from runtime.store.outbox import enqueue_post
from runtime.store.signals import SignalRecord
from runtime.threads import GitHubIssue, SlackThread, ThreadRef


def announce_in(
    session: Transaction,
    reporting: ReportingPolicy,
    record: SignalRecord,
    result: IngestResult,
    now: datetime,
) -> None:
    """The 👀 of an accepted signal (🛑 for a stop), or the escalation of one not taken."""
    if record.thread_ref is None:
        return
    thread = record.thread_ref.root
    if result.decision in ACKNOWLEDGED and result.task_id is not None:
        enqueue_ack(
            session,
            reporting,
            task_id=result.task_id,
            signal_id=record.signal_id,
            # Where the person acted: the mention, the reply, the message reacted to.
            thread=_acted_on(record) or thread,
            now=now,
            emoji="octagonal_sign" if result.decision == "stop" else None,
        )
    elif result.decision == "escalated":
        enqueue_post(
            session,
            task_id=result.task_id or "",
            purpose="escalation",
            thread=thread,
            key=f"escalation:{record.signal_id}",
            action="post",
            body=_escalation_text(result.reason),
            now=now,
        )


def capped_in(
    session: Transaction, record: SignalRecord, signal: Signal, cap: int, now: datetime
) -> None:
    """Say once on the pull request that its CI keeps failing and Keel stopped trying."""
    if signal.linked is None or signal.ci is None:
        return
    enqueue_post(
        session,
        task_id=record.task_id or "",
        purpose="ci_cap",
        thread=signal.linked,
        key=f"ci-cap:{record.objective_key}",
        action="post",
        body=(
            f"CI still fails ({signal.ci.name}: {signal.ci.conclusion} on "
            f"{str(signal.thread_ref).rsplit('@', 1)[-1][:12]}). I have followed up on "
            f"{cap} failed check{'s' if cap != 1 else ''} on this pull request, the limit, "
            "so I am not trying again: it needs a person to look."
        ),
        now=now,
    )


def refuse_in(session: Transaction, record: SignalRecord, now: datetime) -> None:
    """A budget's ``continue`` typed by someone who may not start tasks is answered in
    the thread (a click on Continue is answered to the clicker alone by the adapter), and
    so is a request naming a repository Keel does not reach."""
    if record.decision == "drop" and record.reason == "repo_refused":
        _repo_refused_in(session, record, now)
        return
    refused = record.decision == "drop" and record.reason == "unauthorised"
    if not refused or record.kind == "action" or record.thread_ref is None:
        return
    if budget_answer_of(record.text) != CONTINUE:
        return
    who = (record.actor.name or record.actor.id if record.actor else None) or "someone"
    enqueue_post(
        session,
        task_id="",
        purpose="refusal",
        thread=record.thread_ref.root,
        key=f"refusal:{record.signal_id}",
        action="post",
        body=(
            f"Not continuing on {who}'s word: only people who may start tasks here can "
            "let a task spend more."
        ),
        now=now,
    )


def _repo_refused_in(session: Transaction, record: SignalRecord, now: datetime) -> None:
    named = named_in(record.text)
    if named is None or record.thread_ref is None:
        return
    enqueue_post(
        session,
        task_id="",
        purpose="refusal",
        thread=record.thread_ref.root,
        key=f"refusal:{record.signal_id}",
        action="post",
        body=repo_refused_text(named),
        now=now,
    )


def _acted_on(record: SignalRecord) -> ThreadRef | None:
    """The message a person acted with, if known: the Slack mention, reply, reaction or
    click; the GitHub issue comment or review comment (an issue, a pull request or a review
    has none: its 👀 goes on the issue or pull request)."""
    message = record.message_ref
    return message if isinstance(message, SlackThread | GitHubIssue) else None


def _escalation_text(reason: str | None) -> str:
    return (
        "⚠️ I received this but could not safely attach it to the task already working "
        "here, and I will not start a second one. Please repeat it once that task has "
        f"replied. (reason: {reason})"
    )


def unverified_text(login: str, repo: str) -> str:
    """A held request dropped because its asker's permission could not be looked up."""
    return (
        f"Keel could not verify {login}'s permission on {repo} (GitHub did not answer), so it "
        "did not act on this request. Please ask again in a few minutes."
    )


def refused_text(login: str, repo: str, needed: str) -> str:
    """A held request dropped because its asker's permission is below ``needed``."""
    return (
        f"Sorry {login}, Keel only takes requests from people with at least {needed} "
        f"permission on {repo}."
    )
