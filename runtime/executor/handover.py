"""What a task hands on to the task that follows it (a follow-up after it ended, a
``continue``): the branch its work is on and the commit there, so the successor starts from
that branch, pushes to it and updates the pull request already open rather than opening a
second one.

The branch is read from Keel's own records, never from the workspace: the head branch of a
pull request the predecessor's tree opened (as the pull request's link holds it now), else
the branch its ending saved to, else the last branch it pushed. A predecessor that handed on
nothing of its own passes on what it was handed, a few links back at most.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from runtime.evidence import EvidenceItem
from runtime.scheduler import Scheduler
from runtime.store import ledger, links
from runtime.store.records import Task
from runtime.tools.devbox.gittools import valid_branch

# Followed links of a chain of follow-ups: enough for a conversation, bounded for a cycle.
MAX_LINKS = 8


@dataclass(frozen=True, slots=True)
class Handed:
    task_id: str  # the predecessor whose work this is
    branch: str
    commit: str | None = None  # the sha last pushed there, when Keel knows it
    pull: str | None = None  # the pull request's URL, when one is open for the branch


async def handed_on(scheduler: Scheduler, task: Task) -> Handed | None:
    """The work ``task`` takes over from the tasks it follows; None for a first task."""
    current = task
    for _ in range(MAX_LINKS):
        if current.follows_task_id is None:
            return None
        earlier = await scheduler.get(current.follows_task_id)
        if earlier is None:
            return None
        found = await _work_of(scheduler, earlier)
        if found is not None:
            return found
        current = earlier
    return None


async def _work_of(scheduler: Scheduler, task: Task) -> Handed | None:
    records = await scheduler.db.read(lambda s: ledger.evidence_of_tree(s, task.root_id))
    evidence = [r.item for r in records]
    pull = _pull_of(evidence)
    if pull is not None:
        repo, number = str(pull.detail["repo"]), int(pull.detail["number"])
        link = await scheduler.db.read(lambda s: links.pull_link(s, repo, number))
        linked = link is not None and bool(link.head_ref)
        branch = link.head_ref if link is not None and linked else pull.detail.get("head_ref")
        sha = link.head_sha if link is not None and linked else pull.detail.get("head_sha")
        if isinstance(branch, str) and valid_branch(branch):
            return Handed(task.task_id, branch, str(sha) if sha else None, pull.ref)
    saved = (task.result or {}).get("saved")
    if isinstance(saved, dict) and valid_branch(str(saved.get("branch", ""))):
        commit = saved.get("commit")
        return Handed(task.task_id, str(saved["branch"]), str(commit) if commit else None)
    pushed = [e for e in evidence if e.kind == "commit" and e.detail.get("pushed")]
    if pushed and valid_branch(str(pushed[-1].detail.get("branch", ""))):
        last = pushed[-1].detail
        return Handed(task.task_id, str(last["branch"]), str(last.get("sha") or "") or None)
    return None


def _pull_of(evidence: Sequence[EvidenceItem]) -> EvidenceItem | None:
    pulls = [
        e
        for e in evidence
        if e.kind == "pull_request" and e.detail.get("repo") and e.detail.get("number")
    ]
    return pulls[-1] if pulls else None


def handed_text(handed: Handed) -> str:
    """The lines a successor is told: where the work is, and where its pushes go."""
    at = f" (last commit `{handed.commit[:12]}`)" if handed.commit else ""
    lines = [
        f"Its work is on branch `{handed.branch}`{at}; your workspace starts from that branch "
        "while it exists.",
        f"Push to `{handed.branch}` so the same pull request is updated; do not open another.",
    ]
    if handed.pull:
        lines.insert(1, f"Its pull request: {handed.pull}")
    return "\n".join(lines)
