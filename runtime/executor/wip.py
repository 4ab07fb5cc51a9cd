"""Work in progress is not lost when a task parks at its budget: uncommitted changes in its
workspace are committed and pushed to the task's branch first, through the agent's own
``git_commit`` and ``git_push`` tools (so only when the agent may push, with their refusals
of protected branches, and with the commit's trailer making a retry after a crash find the
commit instead of making another).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import KeelError
from runtime.evidence import EvidenceItem
from runtime.executor.context import ExecutorContext
from runtime.store import ledger
from runtime.store.records import Task
from runtime.tools.base import Completed, Tool, ToolContext
from runtime.workspace.git import workspace_git

log = logging.getLogger(__name__)

MESSAGE = "Work in progress: paused at its budget"


@dataclass(frozen=True, slots=True)
class Saved:
    note: str  # one line for the question: what was saved where, or why not
    evidence: tuple[EvidenceItem, ...] = ()


async def save_work(task: Task, ctx: ExecutorContext, grants: int) -> Saved | None:
    """Commit and push uncommitted work; None when there is nothing to save or no way to."""
    tools = ctx.tools_for(task.agent)
    commit, push = tools.get("git_commit"), tools.get("git_push")
    if commit is None or push is None:
        return None
    try:
        workspace = await ctx.workspace_for(task)
    except KeelError as e:
        log.warning("no workspace to save the work of task %s: %s", task.task_id, e)
        return None
    if workspace is None:
        return None
    call_id = f"budget-{task.task_id}-{grants}"
    committed = await _commit(commit, task, workspace, call_id)
    if committed is None:
        return None
    if committed.is_error:
        return Saved(f"Could not commit the work in progress: {committed.output}")
    branch = await _task_branch(ctx, task)
    here = ToolContext(task.task_id, task.root_id, f"{call_id}-push", task.depth, workspace)
    pushed = await push.start({"branch": branch}, here)
    evidence = committed.evidence
    if not isinstance(pushed, Completed) or pushed.is_error:
        output = pushed.output if isinstance(pushed, Completed) else "it did not finish"
        return Saved(f"Committed the work in progress, but could not push it: {output}", evidence)
    return Saved(
        f"Work in progress committed and pushed to `{branch}`.", evidence + pushed.evidence
    )


async def _commit(commit: Tool, task: Task, ws: Path, call_id: str) -> Completed | None:
    here = ToolContext(task.task_id, task.root_id, call_id, task.depth, ws)
    args = {"message": MESSAGE}
    status = await workspace_git(ws, ["status", "--porcelain"])
    if status.ok and status.stdout.strip():
        started = await commit.start(args, here)
        return started if isinstance(started, Completed) else None
    # Clean: committed already by an attempt a crash cut short, or nothing to save.
    found = await commit.reconcile(args, here)
    return found if isinstance(found, Completed) else None


async def _task_branch(ctx: ExecutorContext, task: Task) -> str:
    """The branch the task last pushed to, else ``keel/<task id>``."""
    records = await ctx.db.read(lambda s: ledger.evidence_of_tree(s, task.root_id))
    return _pushed_branch([r.item for r in records if r.task_id == task.task_id]) or (
        f"keel/{task.task_id}"
    )


def _pushed_branch(evidence: Sequence[EvidenceItem]) -> str | None:
    pushed = [e for e in evidence if e.kind == "commit" and e.detail.get("pushed")]
    return str(pushed[-1].detail["branch"]) if pushed else None
