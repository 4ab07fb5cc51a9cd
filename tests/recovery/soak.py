"""The crash soak: randomised scripted tasks on worker processes SIGKILLed at random instants.

A round schedules a handful of tasks, each a random mix of parallel reads, writes with and
without reconcile, waits, a delegated child and a mailbox message that arrives at a random
moment. Two worker processes run them: one runs a task at a time with its transactions on its
event loop (as ``keel worker`` at concurrency 1 does), the other two at a time on hand-off
threads. A timer in the driver (not a fault point) SIGKILLs a random one of them at random
instants and starts a fresh one of the same kind. After the round the invariants are checked
from the database and the tools' effect logs and counted in a ``Tally``.

Run as ``python -m tests.recovery.soak DB_URL FOLDER SCRIPT_JSON CONCURRENCY`` it is the worker
process: the test stack with the real thread reporter, so completion replies are queued in the
Outbox.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

from sqlalchemy import select
from sqlalchemy.orm import Session

from runtime.clock import SystemClock
from runtime.reporting import ThreadReporter
from runtime.scheduler import Scheduler
from runtime.store import executions, tool_calls, transcripts
from runtime.store.engine import Database
from runtime.store.models import (
    ExecutionRow,
    MailboxMessageRow,
    OutboxRow,
    TaskRow,
    TaskStatusChangeRow,
)
from runtime.store.records import TaskStatus
from runtime.threads import SlackThread
from runtime.tools.base import Completed, Pending, Started, Tool, ToolContext, Unknown
from tests.factories import make_spec, text_part
from tests.harness import ChildAware, build_stack

WRITES = ("create_thing", "create_blind")
TERMINAL = frozenset(s.value for s in TaskStatus if s.is_terminal)
INVARIANTS = (
    "not_finished",
    "not_succeeded",
    "write_repeated",
    "write_lost_silently",
    "interrupted_not_reported",
    "mailbox_not_once",
    "completion_not_once",
    "lease_taken_while_live",
)


@dataclass(frozen=True, slots=True)
class TaskPlan:
    name: str
    message: str
    mailbox: bool


@dataclass
class Tally:
    """Kills, tasks and per-invariant violation counts over any number of rounds."""

    kills: int = 0
    rounds: int = 0
    tasks: int = 0
    writes: int = 0
    interrupted: int = 0
    violations: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)

    def flag(self, invariant: str, detail: str) -> None:
        self.violations[invariant] += 1
        if len(self.examples) < 20:
            self.examples.append(f"{invariant}: {detail}")

    def table(self, label: str) -> str:
        head = (
            f"{label}: {self.kills} kills, {self.rounds} rounds, {self.tasks} tasks "
            f"(children included), {self.writes} writes, {self.interrupted} reported interrupted"
        )
        rows = [f"  {name:<26} {self.violations[name]:>6}" for name in INVARIANTS]
        return "\n".join([head, f"  {'invariant':<26} {'violations':>6}", *rows])


# -- random scripts ---------------------------------------------------------------------------


def _call(name: str, **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args}


def _turns(rng: random.Random, kid: str, mailbox: bool) -> list[dict[str, Any]]:
    kinds = rng.sample(["reads", "write", "blind", "wait", "delegate"], k=rng.randint(2, 4))
    turns: list[dict[str, Any]] = []
    for kind in kinds:
        match kind:
            case "reads":
                reads = [
                    _call("lookup", key=f"k{i}", sleep_s=rng.uniform(0, 0.1)) for i in range(3)
                ]
                turns.append({"tool_calls": reads[: rng.randint(2, 3)]})
            case "write" | "blind":
                name = "create_thing" if kind == "write" else "create_blind"
                turns.append({"tool_calls": [_call(name, title=f"{kind} {len(turns)}")]})
            case "wait":
                turns.append({"tool_calls": [_call("sleep", seconds=rng.uniform(0.1, 0.5))]})
            case "delegate":
                turns.append({"tool_calls": [_call("delegate", goal=kid)]})
                turns.append({"tool_calls": [_call("wait_for_task", task_id="{child}")]})
    final: dict[str, Any] = {"say": "done; see the evidence"}
    if mailbox:
        final["wait_seen"] = ["<mailbox_update>"]
    return [*turns, final]


def random_script(
    rng: random.Random, round_id: str, count: int
) -> tuple[dict[str, Any], list[TaskPlan]]:
    """A model script of ``count`` random tasks (and their children), and the task plans."""
    children: list[dict[str, Any]] = []
    parents: list[dict[str, Any]] = []
    plans: list[TaskPlan] = []
    for n in range(count):
        name = f"soak-{round_id}-{n:02d}"
        kid = f"kid-{round_id}-{n:02d}"
        mailbox = rng.random() < 0.6
        children.append(
            {"match": kid, "turns": [{"tool_calls": [_call("lookup", key="log")]}, {"say": "ok"}]}
        )
        parents.append({"match": name, "turns": _turns(rng, kid, mailbox)})
        plans.append(TaskPlan(name, f"{name}: fix the flaky test", mailbox))
    return {"scripts": children + parents}, plans


# -- worker processes -------------------------------------------------------------------------


WORKER_CONCURRENCY = (1, 2)  # one worker process of each


def spawn_worker(
    db_url: str, folder: Path, script: Path, concurrency: int
) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("KEEL_FAULT")}
    root = Path(__file__).resolve().parents[2]
    command = ["-m", "tests.recovery.soak", db_url, str(folder), str(script), str(concurrency)]
    return subprocess.Popen(
        [sys.executable, *command],
        cwd=root,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=(folder / "worker.err").open("ab"),
    )


class Slowed:
    """A write that takes a while on both sides of its effect, so random kills land there."""

    def __init__(self, inner: Tool) -> None:
        self.inner = inner
        self.name, self.description = inner.name, inner.description
        self.parameters, self.effect = inner.parameters, inner.effect

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        await asyncio.sleep(random.uniform(0, 0.3))
        result = await self.inner.start(args, ctx)
        await asyncio.sleep(random.uniform(0, 0.3))
        return result

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        return await self.inner.poll(handle, ctx)

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return await self.inner.reconcile(args, ctx)


async def worker_main(db_url: str, folder: Path, script_path: Path, concurrency: int) -> None:
    script = json.loads(script_path.read_text())
    stack = build_stack(db_url, folder, ChildAware(script), lease_seconds=1.0)
    stack.ctx.reporter = ThreadReporter(SystemClock())
    tools = cast(dict[str, Tool], stack.ctx.tools)
    for name in WRITES:
        tools[name] = Slowed(tools[name])
    if concurrency == 1:
        stack.db.run_on_loop()  # as keel worker does; PostgreSQL only
    await stack.work_until(folder / "stop", concurrency=concurrency)


# -- one round --------------------------------------------------------------------------------


@dataclass
class _Leases:
    """Leases a killed worker held, which nobody may take before they expire."""

    held: dict[str, tuple[str, datetime]] = field(default_factory=dict)

    def record_kill(self, rows: list[tuple[str, str | None, datetime | None]], pid: int) -> None:
        now = datetime.now(UTC)
        for task_id, owner, expires in rows:
            if owner and expires and expires > now and owner.split(":")[-1].startswith(f"{pid}/"):
                self.held[task_id] = (owner, expires)

    def check(self, rows: list[tuple[str, str | None, datetime | None]], tally: Tally) -> None:
        now = datetime.now(UTC)
        for task_id, owner, _ in rows:
            held = self.held.get(task_id)
            if held is None:
                continue
            if now >= held[1]:
                del self.held[task_id]
            elif owner is not None and owner != held[0]:
                tally.flag("lease_taken_while_live", f"{task_id}: {held[0]} -> {owner}")
                del self.held[task_id]


def _leases(session: Session) -> list[tuple[str, str | None, datetime | None]]:
    rows = session.execute(
        select(ExecutionRow.task_id, ExecutionRow.lease_owner, ExecutionRow.lease_expires_at)
    )
    return [(r[0], r[1], r[2]) for r in rows]


async def run_round(
    db_url: str,
    folder: Path,
    rng: random.Random,
    tally: Tally,
    *,
    kills: int,
    tasks: int = 6,
    max_gap: float = 1.2,
    timeout: float = 120,
) -> int:
    """One round of ``tasks`` tasks under at most ``kills`` kills; returns the kills made."""
    folder.mkdir(parents=True, exist_ok=True)
    script, plans = random_script(rng, folder.name, tasks)
    script_path = folder / "script.json"
    script_path.write_text(json.dumps(script))
    db = Database.from_url(db_url)
    scheduler = Scheduler(db)
    task_ids: dict[str, TaskPlan] = {}
    for plan in plans:
        ref = SlackThread("T1", plan.name, "1700000000.000100")  # a channel per task
        spec = make_spec(message=plan.message, origin_thread_ref=ref, objective_key=str(ref))
        task_ids[(await scheduler.transact(scheduler.schedule, spec)).task.task_id] = plan
    mail_at = {t: time.monotonic() + rng.uniform(0, 2.5) for t, p in task_ids.items() if p.mailbox}
    workers = [spawn_worker(db_url, folder, script_path, n) for n in WORKER_CONCURRENCY]
    leases = _Leases()
    made = 0
    next_kill = time.monotonic() + rng.uniform(0.1, max_gap)
    deadline = time.monotonic() + timeout
    try:
        while True:
            if time.monotonic() > deadline:
                tally.flag("not_finished", f"round {folder.name} timed out")
                break
            for task_id, at in list(mail_at.items()):
                if time.monotonic() >= at:
                    await scheduler.transact(scheduler.append_mailbox,
                        task_id, f"followup-{task_id}", [text_part("it only fails on Safari")], "U1"
                    )
                    del mail_at[task_id]
            rows = await db.read(_leases)
            leases.check(rows, tally)
            if made < kills and time.monotonic() >= next_kill:
                victim = rng.randrange(len(workers))
                workers[victim].send_signal(signal.SIGKILL)
                workers[victim].wait()
                leases.record_kill(await db.read(_leases), workers[victim].pid)
                workers[victim] = spawn_worker(
                    db_url, folder, script_path, WORKER_CONCURRENCY[victim]
                )
                made += 1
                next_kill = time.monotonic() + rng.uniform(0.1, max_gap)
            if not mail_at and await db.read(lambda s: _all_done(s, list(task_ids))):
                break
            await asyncio.sleep(0.05)
    finally:
        await _stop_workers(folder, workers)
    await db.read(lambda s: check_round(s, task_ids, folder, tally))
    tally.kills += made
    tally.rounds += 1
    db.close()
    return made


async def _stop_workers(folder: Path, workers: list[subprocess.Popen[bytes]]) -> None:
    (folder / "stop").write_text("")
    for worker in workers:
        try:
            await asyncio.to_thread(worker.wait, 15)
        except subprocess.TimeoutExpired:
            worker.send_signal(signal.SIGKILL)
            worker.wait()


def _tree(session: Session, roots: list[str]) -> list[TaskRow]:
    return list(session.scalars(select(TaskRow).where(TaskRow.root_id.in_(roots))))


def _all_done(session: Session, roots: list[str]) -> bool:
    tasks = _tree(session, roots)
    phases = dict(
        session.execute(
            select(ExecutionRow.task_id, ExecutionRow.phase).where(
                ExecutionRow.task_id.in_([t.task_id for t in tasks])
            )
        ).all()
    )
    return all(t.status in TERMINAL and phases.get(t.task_id) == "done" for t in tasks)


# -- invariants -------------------------------------------------------------------------------


def _effects(folder: Path) -> Counter[tuple[str, str]]:
    found: Counter[tuple[str, str]] = Counter()
    for name in ("effects.log", "blind.log"):
        path = folder / name
        for line in path.read_text().splitlines() if path.exists() else []:
            task_id, call_id, *_ = line.split(" ")
            found[(task_id, call_id)] += 1
    return found


def check_round(session: Session, roots: dict[str, TaskPlan], folder: Path, tally: Tally) -> None:
    effects = _effects(folder)
    for task in _tree(session, list(roots)):
        tally.tasks += 1
        run = executions.load_run(session, task.task_id)
        if task.status not in TERMINAL or run is None or run.phase != "done":
            tally.flag("not_finished", f"{task.task_id} {task.status} {run and run.phase}")
            continue
        if task.status != TaskStatus.succeeded.value:
            tally.flag("not_succeeded", f"{task.task_id} {task.status} {task.result}")
        _check_writes(session, task, effects, tally)
        _check_mailbox(session, task, roots.get(task.task_id), tally)
        _check_completion(session, task, tally)


def _check_writes(
    session: Session, task: TaskRow, effects: Counter[tuple[str, str]], tally: Tally
) -> None:
    completion = _completions(session, task.task_id)
    body = completion[0].body if completion else ""
    for call in tool_calls.all_calls(session, task.task_id):
        if call.name not in WRITES:
            continue
        tally.writes += 1
        done = effects[(task.task_id, call.call_id)]
        if done > 1:
            tally.flag("write_repeated", f"{task.task_id} {call.call_id} x{done}")
        if call.outcome == "interrupted":
            tally.interrupted += 1
            if task.parent_id is None and (call.name not in body or "interrupted" not in body):
                tally.flag("interrupted_not_reported", f"{task.task_id} {call.call_id}")
        elif done == 0:
            tally.flag("write_lost_silently", f"{task.task_id} {call.call_id} {call.outcome}")


def _check_mailbox(session: Session, task: TaskRow, plan: TaskPlan | None, tally: Tally) -> None:
    expected = 1 if plan is not None and plan.mailbox else 0
    messages = len(
        session.scalars(
            select(MailboxMessageRow.message_id).where(MailboxMessageRow.task_id == task.task_id)
        ).all()
    )
    entries = transcripts.transcript(session, task.task_id)
    items = [e for e in entries if e.item_key.startswith("mbx:")]
    if messages != expected or len(items) != expected:
        tally.flag("mailbox_not_once", f"{task.task_id}: {messages} messages, {len(items)} items")


def _completions(session: Session, task_id: str) -> list[OutboxRow]:
    return list(
        session.scalars(
            select(OutboxRow).where(OutboxRow.task_id == task_id, OutboxRow.purpose == "completion")
        )
    )


def _check_completion(session: Session, task: TaskRow, tally: Tally) -> None:
    terminal = session.scalars(
        select(TaskStatusChangeRow.status).where(TaskStatusChangeRow.task_id == task.task_id)
    ).all()
    finals = [s for s in terminal if s in TERMINAL]
    posts = _completions(session, task.task_id)
    wanted = 0 if task.parent_id else 1
    if len(finals) != 1 or len(posts) != wanted:
        tally.flag(
            "completion_not_once", f"{task.task_id}: {finals} terminal, {len(posts)} replies"
        )


async def soak(
    db_url: str,
    folder: Path,
    *,
    kills: int,
    seed: int,
    tasks: int = 6,
    max_gap: float = 1.2,
    after_round: Callable[[Tally], None] = lambda tally: None,
) -> Tally:
    """Rounds until ``kills`` kills were made; the tally of every invariant."""
    rng = random.Random(seed)
    tally = Tally()
    while tally.kills < kills:
        made = await run_round(
            db_url,
            folder / f"r{tally.rounds:04d}",
            rng,
            tally,
            kills=kills - tally.kills,
            tasks=tasks,
            max_gap=max_gap,
        )
        after_round(tally)
        if made == 0 and tally.violations:
            break
    return tally


if __name__ == "__main__":
    asyncio.run(worker_main(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), int(sys.argv[4])))
