"""Races at the edges of a run, with randomised timing, on a real worker and database.

Follow-up vs completion: a follow-up routed while its task is finishing is either seen by
the active run (its mailbox item is in the transcript) or starts one new task linked by
``follows_task_id``; never lost, never both. Stop vs dispatch: once a stop is recorded, no
tool call is dispatched any more. ``KEEL_SOAK=1`` runs 500 trials of each per database.
"""

from __future__ import annotations

import asyncio
import os
import random
from collections.abc import Awaitable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import select

from routing.config import DaemonsConfig, RoutingConfig
from routing.intake import IngestResult, Router
from routing.policy import RoutingPolicy
from routing.signal import Signal
from runtime.clock import SystemClock
from runtime.store import executions, transcripts
from runtime.store.models import ExecutionRow, MailboxMessageRow, TaskRow, ToolCallRow
from runtime.store.records import TaskSpec, TaskStatus
from runtime.threads import SlackThread
from tests.factories import make_signal
from tests.harness import Stack, build_stack

T = TypeVar("T")
SOAKING = bool(os.environ.get("KEEL_SOAK"))
FOLLOW_UP_TRIALS = 500 if SOAKING else 40
STOP_TRIALS = 500 if SOAKING else 30
WAVE = 40  # trials in flight at once: more only queue behind the worker and the pollers
POLICY = RoutingPolicy.from_config(
    RoutingConfig(channel_repos={"C1": "acme/api"}), DaemonsConfig(), slack_allowed_users=("U1",)
)
SCRIPT: dict[str, Any] = {
    "scripts": [
        {
            "match": "stoppable",
            "turns": [
                {
                    "tool_calls": [
                        {"name": "lookup", "args": {"key": f"k{n}", "sleep_s": 0.02}}
                        for n in range(3)
                    ]
                }
            ]
            * 8
            + [{"say": "read everything"}],
        },
        {
            "turns": [
                {"tool_calls": [{"name": "lookup", "args": {"key": "a"}}]},
                {"say": "done"},
                {"expect_seen": ["<mailbox_update>"], "say": "done, and noted your follow-up"},
            ]
        },
    ]
}


def _signal(thread: SlackThread, n: int, **overrides: Any) -> Signal:
    values: dict[str, Any] = {
        "delivery_id": f"Ev-{thread}-{n}",
        "thread_ref": thread,
        "text": f"follow-up {n} for {thread}",
        "received_at": datetime.now(UTC),
        "dedupe_key": f"{thread}:{n}",
    }
    return make_signal(**{**values, **overrides})


def _race_thread(n: int) -> SlackThread:
    return SlackThread("T1", "C1", f"1700000000.{n:06d}")


async def _gated(gate: asyncio.Semaphore, trial: Awaitable[T]) -> T:
    async with gate:
        return await trial


async def _ingest(router: Router, signal: Signal) -> IngestResult:
    return await router.ingest(
        signal, provider=signal.provider, delivery_id=signal.delivery_id, raw_kind=signal.kind
    )


@dataclass
class Bench:
    stack: Stack
    router: Router


@contextmanager
def _bench(db_url: str, folder: Path) -> Iterator[Bench]:
    folder.mkdir(parents=True, exist_ok=True)
    stack = build_stack(db_url, folder, SCRIPT)
    router = Router(stack.scheduler, stack.db, POLICY, SystemClock(), retry_delays=(0, 0.05))
    try:
        yield Bench(stack, router)
    finally:
        stack.db.close()


async def _schedule(bench: Bench, thread: SlackThread, message: str) -> str:
    spec = TaskSpec(
        agent="default",
        message=message,
        origin_thread_ref=thread,
        objective_key=str(thread),
        requested_by="U1",
    )
    return (await bench.stack.scheduler.transact(bench.stack.scheduler.schedule, spec)).task.task_id


async def _until_quiet(bench: Bench, timeout: float = 90 + FOLLOW_UP_TRIALS) -> None:
    def settled(session: Any) -> bool:
        tasks = session.scalars(select(TaskRow)).all()
        phases = dict(session.execute(select(ExecutionRow.task_id, ExecutionRow.phase)).all())
        return all(
            TaskStatus(t.status).is_terminal and phases.get(t.task_id) == "done" for t in tasks
        )

    async with asyncio.timeout(timeout):
        while not await bench.stack.db.read(settled):
            await asyncio.sleep(0.05)


@dataclass(frozen=True)
class Aim:
    """When a wave's follow-ups are sent: after a random delay of up to ``spread_s``, from
    the run's last turn on (moments from completion) or from the moment it is scheduled."""

    spread_s: float
    from_last_turn: bool


# The first wave aims at completion. Load on the host can move every follow-up of a wave to
# one side of it; a second wave then spreads follow-ups over the whole run and beyond.
AIMS = (Aim(0.12, from_last_turn=True), Aim(2.0, from_last_turn=False))


async def _follow_up_trial(
    bench: Bench, rng: random.Random, n: int, aim: Aim
) -> tuple[str, str]:
    thread = _race_thread(n)
    task_id = await _schedule(bench, thread, f"race {n}: fix it")
    while aim.from_last_turn and (
        (run := await bench.stack.db.read(lambda s: executions.load_run(s, task_id))) is None
        or (run.turn < 1 and run.phase != "done")
    ):
        await asyncio.sleep(0.01)
    await asyncio.sleep(rng.uniform(0, aim.spread_s))
    # Addressed to the bot, so it is a request whether or not its task has just finished
    # (an unaddressed remark after completion is dropped by policy, not by a race).
    result = await _ingest(bench.router, _signal(thread, n, addresses_bot=True))
    return task_id, result.decision


def _fate(session: Any, task_id: str, thread: SlackThread, n: int) -> list[str]:
    """Where follow-up ``n`` ended up: 'transcript', 'linked', and any sign of loss."""
    text = f"follow-up {n} for {thread}"
    fates = []
    messages = session.scalars(
        select(MailboxMessageRow).where(MailboxMessageRow.task_id == task_id)
    ).all()
    seen = [
        e
        for e in transcripts.transcript(session, task_id)
        if e.item_key.startswith("mbx:") and text in str(e.payload)
    ]
    if messages and seen:
        fates.append("transcript")
    elif messages:
        fates.append("mailbox_unread")
    linked = session.scalars(select(TaskRow).where(TaskRow.follows_task_id == task_id)).all()
    fates += ["linked" for t in linked if text in t.message]
    fates += ["stray_task" for t in linked if text not in t.message]
    return fates


async def test_follow_up_is_seen_or_starts_one_linked_task_when_it_races_completion(
    db_url: str, tmp_path: Path
) -> None:
    rng = random.Random()
    fates: list[tuple[str, list[str]]] = []
    with _bench(db_url, tmp_path) as bench:
        worker = bench.stack.worker(concurrency=6)
        running = asyncio.create_task(worker.run())
        try:
            gate = asyncio.Semaphore(WAVE)
            for aim in AIMS:
                first = len(fates)
                numbers = range(first, first + FOLLOW_UP_TRIALS)
                trials = await asyncio.gather(
                    *(_gated(gate, _follow_up_trial(bench, rng, n, aim)) for n in numbers)
                )
                await _until_quiet(bench)
                fates += await bench.stack.db.read(partial(_fates, trials=trials, first=first))
                if {f[0] for _, f in fates if f} == {"transcript", "linked"}:
                    break
        finally:
            worker.stop()
            await running
    wrong = [(n, d, f) for n, (d, f) in enumerate(fates) if f not in (["transcript"], ["linked"])]
    assert wrong == []
    # Both outcomes are reached, so the timing really straddles completion.
    kinds = {f[0] for _, f in fates}
    assert kinds == {"transcript", "linked"}, kinds


def _fates(
    session: Any, trials: list[tuple[str, str]], first: int
) -> list[tuple[str, list[str]]]:
    return [
        (decision, _fate(session, task_id, _race_thread(n), n))
        for n, (task_id, decision) in enumerate(trials, start=first)
    ]


async def _stop_trial(bench: Bench, rng: random.Random, n: int) -> str:
    thread = SlackThread("T1", "C1", f"1700000001.{n:06d}")
    task_id = await _schedule(bench, thread, f"stoppable {n}")
    await asyncio.sleep(rng.uniform(0.05, 1.0))
    stop = _signal(thread, n, kind="mention", addresses_bot=True, command="stop", text="stop")
    result = await _ingest(bench.router, stop)
    assert result.decision in ("stop", "new_task", "drop"), result
    return task_id


def _dispatched_after_stop(session: Any, task_id: str) -> list[str]:
    task = session.get(TaskRow, task_id)
    if task.cancel_requested_at is None:
        return []
    calls = session.scalars(select(ToolCallRow).where(ToolCallRow.task_id == task_id)).all()
    return [
        c.call_id
        for c in calls
        if c.dispatched_at is not None and c.dispatched_at > task.cancel_requested_at
    ]


async def test_no_tool_is_dispatched_when_stop_was_recorded_first(
    db_url: str, tmp_path: Path
) -> None:
    rng = random.Random()
    with _bench(db_url, tmp_path) as bench:
        worker = bench.stack.worker(concurrency=6)
        running = asyncio.create_task(worker.run())
        try:
            gate = asyncio.Semaphore(WAVE)
            ids = await asyncio.gather(
                *(_gated(gate, _stop_trial(bench, rng, n)) for n in range(STOP_TRIALS))
            )
            await _until_quiet(bench)
        finally:
            worker.stop()
            await running
        late = await bench.stack.db.read(lambda s: {t: _dispatched_after_stop(s, t) for t in ids})
        statuses = await bench.stack.db.read(
            lambda s: [row.status for t in ids if (row := s.get(TaskRow, t)) is not None]
        )
    assert {t: c for t, c in late.items() if c} == {}
    assert "canceled" in statuses
