"""The communication policy: what people in the thread see, and when.

An acknowledgement on the origin, one progress message edited in place, and one completion
reply that lists the evidence with its strength. Every post goes through the Outbox with a
key (task, purpose), so it lands at most once. A reply never claims what the ledger lacks.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from runtime import crossposts
from runtime.clock import Clock
from runtime.daemon_role import DaemonRole
from runtime.evidence import EvidenceItem, Strength
from runtime.reply import Reply, to_markdown
from runtime.store import ledger, outbox, tool_calls, usage
from runtime.store import tasks as store_tasks
from runtime.store.engine import Transaction
from runtime.store.records import Task, TaskResult, TaskStatus
from runtime.store.tool_calls import ToolCallRecord
from runtime.store.usage import UsageTotals
from runtime.surfaces import Action
from runtime.threads import ThreadRef
from runtime.workspace.setup import report_from

PHASE_LABELS = {
    "load_context": "reading the request",
    "check_scheduler": "checking for new input",
    "call_model": "thinking",
    "dispatch_tools": "running tools",
    "await_tools": "waiting for tools",
    "advance_turn": "reviewing results",
}


def is_daemon(task: Task) -> bool:
    return DaemonRole.of(task.objective_key) is not None


def progress_key(task_id: str) -> str:
    return f"{task_id}:progress"


def completion_key(task_id: str) -> str:
    return f"{task_id}:completion"


def ack_key(signal_id: str) -> str:
    return f"ack:{signal_id}"


def stop_action(task_id: str) -> Action:
    """The Stop button on a task's progress message; a click stops the task like 🛑."""
    return Action(name="stop", label="Stop", value=task_id, style="danger")


@dataclass(frozen=True, slots=True)
class ReportingPolicy:
    ack: str = "reaction"  # reaction | reply
    ack_emoji: str = "eyes"
    progress: bool = True
    public_url: str | None = None  # where people reach Keel's UI; replies link their task there

    def task_link(self, task_id: str) -> str | None:
        if not self.public_url:
            return None
        return f"{self.public_url.rstrip('/')}/ui/tasks/{task_id}"


def enqueue_ack(
    session: Transaction,
    policy: ReportingPolicy,
    *,
    task_id: str,
    signal_id: str,
    thread: ThreadRef,
    now: datetime,
    emoji: str | None = None,
) -> None:
    """Acknowledge an accepted signal on its origin: a reaction, or a short reply."""
    reply = policy.ack == "reply" and emoji is None
    outbox.enqueue_post(
        session,
        task_id=task_id,
        purpose="ack",
        thread=thread,
        key=ack_key(signal_id),
        action="post" if reply else "react",
        body="On it." if reply else (emoji or policy.ack_emoji),
        now=now,
    )


class ThreadReporter:
    """The executor's Reporter: queues progress and completion posts in its transactions."""

    def __init__(self, clock: Clock, policy: ReportingPolicy | None = None) -> None:
        self.clock = clock
        self.policy = policy or ReportingPolicy()

    def on_phase(self, session: Transaction, task: Task, phase: str, detail: str) -> None:
        if not self.policy.progress or task.origin_thread_ref is None or task.parent_id:
            return
        if is_daemon(task):
            return  # persistent roles speak only when they have something to show
        body = progress_text(task, detail or PHASE_LABELS.get(phase, phase))
        key = progress_key(task.task_id)
        outbox.enqueue_post(
            session,
            task_id=task.task_id,
            purpose="progress",
            thread=task.origin_thread_ref,
            key=key,
            action="post",
            body=body,
            now=self.clock.now(),
            actions=(stop_action(task.task_id),),
        )
        outbox.set_body(session, key, body)

    def on_finished(self, session: Transaction, task: Task, result: TaskResult) -> None:
        if task.origin_thread_ref is None or task.parent_id:
            return
        evidence = [r.item for r in ledger.evidence_of_tree(session, task.root_id)]
        if is_daemon(task) and not evidence and result.status is TaskStatus.succeeded:
            return  # a daemon's no-op stays silent
        calls = tool_calls.all_calls(session, task.task_id)
        uncertain = [c.name for c in calls if c.outcome == "interrupted"]
        spent = usage.tree_totals(session, task.root_id)
        tasks = store_tasks.tree_size(session, task.root_id)
        body = completion_text(
            result,
            evidence,
            uncertain,
            refused=refused_writes(calls),
            link=self.policy.task_link(task.task_id),
            spend=spend_line(spent, tasks) if spent.calls else None,
            repo=task.repo,
        )
        now = self.clock.now()
        outbox.enqueue_post(
            session,
            task_id=task.task_id,
            purpose="completion",
            thread=task.origin_thread_ref,
            key=completion_key(task.task_id),
            action="post",
            body=body,
            now=now,
        )
        crossposts.enqueue(session, task, result, body, now)
        if self.policy.progress:
            # The outcome takes the place of the Stop button.
            done = progress_text(task, _done_label(result))
            outbox.set_body(session, progress_key(task.task_id), done, actions=())


def _done_label(result: TaskResult) -> str:
    return {
        TaskStatus.succeeded: "finished — see the reply below",
        TaskStatus.failed: "stopped with a problem — see the reply below",
        TaskStatus.canceled: "stopped on request",
        TaskStatus.timed_out: "timed out",
    }.get(result.status, result.status.value)


def spend_line(totals: UsageTotals, tasks: int = 1) -> str:
    """"12.4k tokens · $0.03 · 6 turns": what the task's tree spent on its model; with
    "· 3 tasks" when delegation made the tree larger than the task."""
    turns = f"{totals.turns} turn{'' if totals.turns == 1 else 's'}"
    line = f"{_tokens(totals.total_tokens)} tokens · ${totals.cost_usd:.2f} · {turns}"
    return f"{line} · {tasks} tasks" if tasks > 1 else line


def _tokens(n: int) -> str:
    if n < 1_000:
        return str(n)
    if n < 1_000_000:
        return f"{n / 1_000:.1f}k"
    return f"{n / 1_000_000:.2f}M"


def progress_text(task: Task, step: str) -> str:
    return f"⏳ Working on it: {step}"


def refused_writes(calls: Sequence[ToolCallRecord]) -> list[str]:
    """Writes whose last attempt did not succeed: the artifact they were for is missing."""
    last: dict[str, str | None] = {}
    for call in sorted(calls, key=lambda c: (c.turn, c.idx)):
        if call.effect == "write":
            last[call.name] = call.outcome
    return [name for name, outcome in last.items() if outcome in ("error", "deadline")]


def completion_text(
    result: TaskResult,
    evidence: Sequence[EvidenceItem],
    uncertain: Sequence[str],
    *,
    refused: Sequence[str] = (),
    link: str | None = None,
    spend: str | None = None,
    repo: str | None = None,
) -> str:
    """The final reply; its headline is only as confident as the evidence below it. It
    names the repository the task worked in, which the request may have chosen."""
    reply = completion_reply(result, evidence, uncertain, refused=refused, link=link)
    return to_markdown(replace(reply, spend=spend, repo=repo))


def completion_reply(
    result: TaskResult,
    evidence: Sequence[EvidenceItem],
    uncertain: Sequence[str],
    *,
    refused: Sequence[str] = (),
    link: str | None = None,
) -> Reply:
    shown = newest_per_ref(evidence)
    doubtful = bool(uncertain or refused) or any(_unconfirmed(item) for item in shown)
    paragraphs = [result.summary] if result.summary else []
    if not shown and result.status is TaskStatus.succeeded:
        paragraphs.append(
            "_No artifacts were recorded for this task, so nothing here is verified._"
        )
    notes = []
    if uncertain:
        names = ", ".join(sorted(set(uncertain)))
        notes.append(
            f"⚠️ Uncertain: {names} was interrupted after dispatch; whether it took "
            "effect is unknown and it was not repeated."
        )
    if refused:
        names = ", ".join(sorted(set(refused)))
        notes.append(f"⚠️ Not done: {names} did not succeed, so what it was for is missing.")
    return Reply(
        headline=_headline(result, doubtful),
        paragraphs=tuple(paragraphs),
        evidence=tuple(describe_evidence(item) for item in shown),
        notes=tuple(notes),
        link=link,
    )


_WRITES = frozenset({"commit", "pull_request", "comment"})


def _unconfirmed(item: EvidenceItem) -> bool:
    """A written artifact nobody read back, or CI that is not verified green."""
    if item.kind in _WRITES:
        return item.strength < Strength.provider_read_back
    return item.kind == "ci_run" and item.strength < Strength.verified


def _headline(result: TaskResult, doubtful: bool) -> str:
    outcome = str(result.detail.get("outcome", ""))
    if outcome.startswith("limit:"):
        return f"🛑 I stopped at a limit ({outcome.removeprefix('limit:')})."
    if result.status is TaskStatus.succeeded and doubtful:
        return "⚠️ Finished, but not everything is confirmed: see below."
    return {
        TaskStatus.succeeded: "✅ Done.",
        TaskStatus.failed: "❌ I could not finish this.",
        TaskStatus.canceled: "⏹️ Stopped, as asked. Nothing new was started after the stop.",
        TaskStatus.timed_out: "⌛ This task ran past its deadline and was stopped.",
    }.get(result.status, result.status.value)


def newest_per_ref(evidence: Sequence[EvidenceItem]) -> list[EvidenceItem]:
    """One line per artifact, keeping its strongest observation."""
    best: dict[tuple[str, str], EvidenceItem] = {}
    for item in evidence:
        key = (item.kind, item.ref)
        if key not in best or item.strength >= best[key].strength:
            best[key] = item
    return list(best.values())


STRENGTH_WORDS = {
    Strength.tool_reported: "tool said",
    Strength.provider_read_back: "read back from the provider",
    Strength.verified: "verified",
}


def describe_evidence(item: EvidenceItem) -> str:
    d: dict[str, Any] = dict(item.detail)
    strength = STRENGTH_WORDS.get(item.strength, str(item.strength))
    match item.kind:
        case "pull_request":
            where = (
                "read back from GitHub"
                if item.strength >= Strength.provider_read_back
                else strength
            )
            return f"PR #{d.get('number', '?')} {d.get('url', '')} — {where}".replace("  ", " ")
        case "commit":
            sha = str(d.get("sha", item.ref))[:7]
            branch = f" on `{d['branch']}`" if d.get("branch") else ""
            return f"Commit {sha}{branch} — {strength}"
        case "test_run":
            command = shown_command(str(d.get("command", item.ref)))
            return f"`{command}` exit {d.get('exit_code', '?')}{_counts(d)} — {strength}"
        case "ci_run":
            return _ci_line(d, item.strength)
        case "setup":
            report = report_from(d)
            line = f"Setup: {report.summary()}"
            if report.refused:
                line += f"; network refused {', '.join(report.refused)}"
            return line if report.status == "restored" else f"{line} — {strength}"
        case "network_refused":
            return f"Network: refused {item.ref} (not in the allowlist)"
        case "read_back" if "review_id" in d:
            count = d.get("comments", "?")
            noun = "comment" if count == 1 else "comments"
            sha = str(d.get("sha", "?"))[:7]
            return f"Review read back on {sha}: {count} {noun} — {item.ref}"
        case _:
            return f"{item.kind} {item.ref} — {strength}"


# A program named by its absolute path in some toolchain's bin folder, where a shell reads a
# program (at the start, after ; & | or a parenthesis): `/home/me/.venv/bin/python` (the demo
# runs the interpreter Keel runs on, by path), `/usr/bin/python3`.
_TOOLCHAIN_PROGRAM = re.compile(
    r"(^\s*|[;&|(]\s*)/(?:[^\s/;&|()]+/)*bin/([^\s/;&|()]+)(?=[\s;&|)]|$)"
)


def shown_command(command: str) -> str:
    """A command as a reader should see it: programs by name, not by the host path of their
    toolchain (which says nothing about the result and tells a thread about Keel's host).
    Only ``…/bin/NAME`` words change; the evidence itself keeps the command as it ran."""
    return _TOOLCHAIN_PROGRAM.sub(lambda m: m.group(1) + m.group(2), command)


def _counts(d: dict[str, Any]) -> str:
    parts = [f"{d[k]} {k}" for k in ("passed", "failed", "errors", "skipped") if d.get(k)]
    return (", " + ", ".join(parts)) if parts else ""


def _ci_line(d: dict[str, Any], strength: Strength) -> str:
    sha = str(d.get("sha", d.get("head_sha", "")))[:7]
    checks = d.get("checks")
    total = len(checks) if isinstance(checks, list) else d.get("total")
    failed = d.get("failed")
    passed = total - len(failed) if total is not None and isinstance(failed, list) else total
    if strength >= Strength.verified:
        count = f"{passed}/{total} checks passed" if total is not None else "all checks passed"
        return f"CI: {count} on {sha} — verified"
    conclusion = d.get("conclusion", "not passing")
    return f"CI on {sha}: {conclusion} — {STRENGTH_WORDS[strength]}"
