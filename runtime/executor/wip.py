"""Work in progress is not lost when a task ends or parks: uncommitted changes in its
workspace are committed and pushed to the task's branch first, through the agent's own
``git_commit`` and ``git_push`` tools (so only when the agent may push, with their refusals
of protected branches, and with the commit's trailer making a retry after a crash find the
commit instead of making another).

Every ending saves: a budget pause, a stop, the deadline, each limit and a failure
(``runtime.executor.endings``). The save's call id is keyed by the task and its ending, so
an ending phase re-run after a crash finds its commit and pushes it, once. Only a root task
saves: its children share its checkout, and the root's ending saves what they left.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import KeelError
from runtime.evidence import EvidenceItem
from runtime.executor import handover
from runtime.executor.context import ExecutorContext
from runtime.store import ledger
from runtime.store.records import Task
from runtime.tools.base import Completed, Tool, ToolContext
from runtime.workspace.git import workspace_git

log = logging.getLogger(__name__)

# The point between the commit and its push: a crash here must leave one commit, pushed.
COMMITTED_POINT = "wip:committed"


@dataclass(frozen=True, slots=True)
class Ending:
    """Why the work is saved now: ``name`` keys the save's call id (with ``nth`` for an
    ending that may come again, like a budget granted more), ``reason`` ends its message."""

    name: str
    reason: str
    nth: int | None = None

    def call_id(self, task_id: str) -> str:
        suffix = "" if self.nth is None else f"-{self.nth}"
        return f"{self.name}-{task_id}{suffix}"

    @property
    def message(self) -> str:
        return f"Work in progress: {self.reason}"


def budget_ending(grants: int) -> Ending:
    return Ending("budget", "paused at its budget", grants)


@dataclass(frozen=True, slots=True)
class Saved:
    note: str  # one line for the reply: what was saved where, or why not
    evidence: tuple[EvidenceItem, ...] = ()
    branch: str | None = None  # where the work was pushed; None unless it was
    commit: str | None = None  # the full sha pushed there

    @property
    def pushed(self) -> bool:
        return self.commit is not None


async def save_work(task: Task, ctx: ExecutorContext, ending: Ending) -> Saved | None:
    """Commit and push uncommitted work; None when there is nothing to save or no way to.

    Never raises for a failed save: the caller is ending or parking the task either way, so
    the failure becomes the note the reply carries."""
    try:
        return await _save(task, ctx, ending)
    except Exception as e:  # the task must end, or park, even when saving breaks
        log.warning("saving the work of task %s failed", task.task_id, exc_info=True)
        return Saved(f"Could not save the work in progress: {type(e).__name__}: {e}")


async def _save(task: Task, ctx: ExecutorContext, ending: Ending) -> Saved | None:
    tools = ctx.tools_for(task.agent)
    commit, push = tools.get("git_commit"), tools.get("git_push")
    if commit is None or push is None or task.parent_id is not None:
        return None
    try:
        workspace = await ctx.workspace_for(task)
    except KeelError as e:
        log.warning("no workspace to save the work of task %s: %s", task.task_id, e)
        return None
    if workspace is None:
        return None
    call_id = ending.call_id(task.task_id)
    committed = await _commit(commit, task, workspace, call_id, ending.message)
    if committed is None:
        return None
    if committed.is_error:
        return Saved(f"Could not commit the work in progress: {committed.output}")
    ctx.faults.hit(COMMITTED_POINT)
    branch = await _task_branch(ctx, task)
    here = ToolContext(task.task_id, task.root_id, f"{call_id}-push", task.depth, workspace)
    pushed = await push.start({"branch": branch}, here)
    evidence = committed.evidence
    if not isinstance(pushed, Completed) or pushed.is_error:
        output = pushed.output if isinstance(pushed, Completed) else "it did not finish"
        return Saved(f"Committed the work in progress, but could not push it: {output}", evidence)
    sha = _pushed_sha(pushed.evidence)
    return Saved(
        f"Work in progress committed and pushed to `{branch}`"
        + (f" at `{sha[:12]}`." if sha else "."),
        evidence + pushed.evidence,
        branch,
        sha,
    )


async def _commit(
    commit: Tool, task: Task, ws: Path, call_id: str, message: str
) -> Completed | None:
    here = ToolContext(task.task_id, task.root_id, call_id, task.depth, ws)
    args = {"message": message}
    status = await workspace_git(ws, ["status", "--porcelain"])
    if status.ok and status.stdout.strip():
        started = await commit.start(args, here)
        return started if isinstance(started, Completed) else None
    # Clean: committed already by an attempt a crash cut short, or nothing to save.
    found = await commit.reconcile(args, here)
    return found if isinstance(found, Completed) else None


async def _task_branch(ctx: ExecutorContext, task: Task) -> str:
    """The branch the task last pushed to, else the one its predecessor handed on (its pull
    request is updated rather than a second opened), else ``keel/<task id>``."""
    records = await ctx.db.read(lambda s: ledger.evidence_of_tree(s, task.root_id))
    pushed = _pushed_branch([r.item for r in records if r.task_id == task.task_id])
    if pushed is not None:
        return pushed
    handed = await handover.handed_on(ctx.scheduler, task)
    return handed.branch if handed is not None else f"keel/{task.task_id}"


def _pushed_branch(evidence: Sequence[EvidenceItem]) -> str | None:
    pushed = [e for e in evidence if e.kind == "commit" and e.detail.get("pushed")]
    return str(pushed[-1].detail["branch"]) if pushed else None


def _pushed_sha(evidence: Sequence[EvidenceItem]) -> str | None:
    shas = [str(e.detail["sha"]) for e in evidence if e.kind == "commit" and e.detail.get("sha")]
    return shas[-1] if shas else None
