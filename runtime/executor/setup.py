"""The workspace's setup step at task start, before the first model call: its progress in
the thread, and its outcome as an evidence row (``runtime.workspace.setup`` runs it).

Only a root task sets up: its children share its workspace. A workspace that cannot be made
(a clone that failed) does not stop the task either; the brief says so, as it says a failed
setup, and the agent's tools report the same when used.
"""

from __future__ import annotations

import logging
from datetime import datetime

from runtime.errors import KeelError
from runtime.evidence import EvidenceItem, Strength
from runtime.executor.context import ExecutorContext
from runtime.store import ledger
from runtime.store.engine import Transaction
from runtime.store.records import Task
from runtime.workspace.setup import SetupReport

log = logging.getLogger(__name__)


async def prepare(task: Task, ctx: ExecutorContext) -> SetupReport | None:
    if task.parent_id is not None or not task.repo:
        return None

    async def started(what: str) -> None:
        await ctx.db.run(lambda s: ctx.reporter.on_phase(s, task, "setup", what))

    try:
        return await ctx.prepare_workspace(task, started)
    except (KeelError, OSError) as e:  # a clone that failed, a disk that is full
        log.warning("the workspace of task %s could not be prepared: %s", task.task_id, e)
        return SetupReport("unavailable", outcome=str(e)[:500])


def record(session: Transaction, task: Task, report: SetupReport | None, now: datetime) -> None:
    """The setup's outcome as the task's evidence (nothing when there was no setup)."""
    if report is None or report.status == "none":
        return
    item = EvidenceItem("setup", f"setup:{task.root_id}", Strength.tool_reported, report.as_dict())
    ledger.add_evidence(session, task.task_id, task.root_id, None, item, now)
