"""The crash scenario: a scripted task of five turns touching every kind of tool.

Turn 0 reads in parallel, turn 1 makes two writes (one reconcilable, one not), turn 2 waits
on external work and delegates a child, turn 3 waits for the child, turn 4 needs the mailbox
message that arrives mid-run, then answers.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sqlalchemy import func, select

from runtime.scheduler import Scheduler
from runtime.store import executions, tool_calls, transcripts
from runtime.store.engine import Database
from runtime.store.models import MailboxMessageRow, TaskRow
from runtime.store.records import TaskStatus
from tests.factories import make_spec, text_part
from tests.recovery.single import run_task


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


SCRIPT: dict[str, Any] = {
    "scripts": [
        {
            "match": "Goal: inspect logs",
            "turns": [
                {"tool_calls": [_call("lookup", key="log")]},
                {"say": "the logs show a race"},
            ],
        },
        {
            "turns": [
                {"tool_calls": [_call("lookup", key="a"), _call("lookup", key="b")]},
                {
                    "tool_calls": [
                        _call("create_thing", title="pull request"),
                        _call("create_blind", title="comment"),
                    ]
                },
                {
                    "tool_calls": [
                        _call("sleep", seconds=0.3),
                        _call("delegate", goal="inspect logs"),
                    ]
                },
                {"tool_calls": [_call("wait_for_task", task_id="{child}")]},
                {"wait_seen": ["<mailbox_update>"], "say": "fixed it; see the pull request"},
            ]
        },
    ]
}

FOLLOW_UP = "it only fails on Safari"


@dataclass
class Outcome:
    status: TaskStatus
    effects: list[str]
    blind: list[str]
    children: int
    mailbox_items: int
    mailbox_messages: int
    result_order_ok: bool
    interrupted: list[str]


async def run_scenario(
    db_url: str,
    folder: Path,
    *,
    fault: str | None = None,
    trace: Path | None = None,
    timeout: float = 150,
) -> Outcome:
    """Run the task with an optional kill point, restart after a kill, wait for the end."""
    appended: list[str] = []

    async def follow_up(
        scheduler: Scheduler, task_id: str, run: executions.Run, died: bool
    ) -> None:
        """The follow-up arrives once: at turn 1, or at the kill if that comes first."""
        if not appended and (run.turn >= 1 or died):
            await scheduler.transact(
                scheduler.append_mailbox, task_id, "followup-1", [text_part(FOLLOW_UP)], "U1"
            )
            appended.append(task_id)

    spec = make_spec(message="fix the flaky checkout test")
    task_id = await run_task(
        db_url,
        folder,
        SCRIPT,
        spec=spec,
        fault=fault,
        trace=trace,
        on_tick=follow_up,
        timeout=timeout,
    )
    db = Database.from_url(db_url)
    outcome = await _observe(db, task_id, folder)
    db.close()
    return outcome


async def _observe(db: Database, task_id: str, folder: Path) -> Outcome:
    def read(session: Any) -> tuple[Any, ...]:
        task = session.get(TaskRow, task_id)
        children = session.execute(
            select(func.count()).select_from(TaskRow).where(TaskRow.parent_id == task_id)
        ).scalar_one()
        messages = session.execute(
            select(func.count())
            .select_from(MailboxMessageRow)
            .where(MailboxMessageRow.task_id == task_id)
        ).scalar_one()
        return (
            task,
            children,
            messages,
            transcripts.transcript(session, task_id),
            tool_calls.all_calls(session, task_id),
        )

    task, children, messages, entries, calls = await db.run(read)
    keys = [e.item_key for e in entries]
    order_ok = True
    for turn in {c.turn for c in calls}:
        expected = [
            f"result:{c.call_id}" for c in sorted(calls, key=lambda c: c.idx) if c.turn == turn
        ]
        seen = [k for k in keys if k in expected]
        order_ok = order_ok and seen == expected

    def lines(name: str) -> list[str]:
        path = folder / name
        return path.read_text().splitlines() if path.exists() else []

    return Outcome(
        status=TaskStatus(task.status),
        effects=[line for line in lines("effects.log") if line.startswith(task_id)],
        blind=lines("blind.log"),
        children=children,
        mailbox_items=len([k for k in keys if k.startswith("mbx:")]),
        mailbox_messages=messages,
        result_order_ok=order_ok,
        interrupted=[c.name for c in calls if c.outcome == "interrupted"],
    )
