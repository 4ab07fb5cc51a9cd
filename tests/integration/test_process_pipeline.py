"""``run_pipeline``: a producer started ahead (``Waiting``) or now, streaming into a consumer,
and a timeout that leaves nothing of either running, however deep the producer's tree."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
import uuid

import pytest

from runtime.errors import Retryable
from runtime.workspace.process import Waiting, descendants, kill_below, run_pipeline


async def test_a_waiting_producer_gets_its_input_and_streams_into_the_consumer() -> None:
    waiting = Waiting(["bash", "-c", "read -r n && tr a-z A-Z"], cwd=None, env=os.environ)
    produced, consumed = await run_pipeline(
        waiting, ["wc", "-c"], second_env=os.environ, stdin=b"3\nhello\n", timeout_s=30
    )
    assert produced.ok and consumed.ok
    assert consumed.stdout.strip() == "6"  # "HELLO\n": the first line was the producer's own


async def test_a_timeout_kills_the_producers_whole_tree() -> None:
    tag = f"keel-test-{uuid.uuid4().hex}"
    # The producer's child ignores its input and outlives a kill of its parent alone.
    script = f"bash -c 'exec -a {tag} sleep 300' & exec -a {tag}-parent sleep 300"
    waiting = Waiting(["bash", "-c", script], cwd=None, env=os.environ)
    pid = waiting.popen.pid
    with pytest.raises(Retryable):
        await run_pipeline(waiting, ["cat"], second_env=os.environ, stdin=b"", timeout_s=1)
    waiting.popen.wait(timeout=10)
    left = await _left(tag)
    assert left == [], f"still running after the timeout: {left} (below {pid}: {descendants(pid)})"


async def _left(tag: str, within_s: float = 10.0) -> list[int]:
    """The processes named with ``tag`` that are still there after ``within_s``. A process
    sent SIGKILL still shows its command line until it has run its own exit, which on a
    loaded host is not at once; one that escaped the kill is still there seconds later."""
    deadline = time.monotonic() + within_s
    while (left := [p for p in _all_pids() if tag in _cmdline(p)]) and time.monotonic() < deadline:
        await asyncio.sleep(0.05)
    return left


def _all_pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _cmdline(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


async def test_a_cancelled_pipeline_leaves_nothing_running() -> None:
    """Keel stopping (its task cancelled) mid-send ends the producer's tree too: a sandbox
    that never exits would otherwise outlive Keel, and hold its shutdown."""
    tag = f"keel-test-{uuid.uuid4().hex}"
    script = f"bash -c 'exec -a {tag} sleep 300' & exec -a {tag}-parent sleep 300"
    waiting = Waiting(["bash", "-c", script], cwd=None, env=os.environ)
    running = asyncio.create_task(
        run_pipeline(waiting, ["cat"], second_env=os.environ, stdin=b"", timeout_s=60)
    )
    stdin = waiting.popen.stdin
    assert stdin is not None
    # Mid-send: the pipeline gave the producer its stdin (and closed it), and both of the
    # producer's processes run. Seeing the processes alone is not enough: on a loaded host
    # they can be up before the pipeline's task has run at all, and a task cancelled before
    # it starts never reaches the code under test.
    for _ in range(200):
        if stdin.closed and len([p for p in _all_pids() if tag in _cmdline(p)]) == 2:
            break
        await asyncio.sleep(0.05)
    running.cancel()
    with pytest.raises(asyncio.CancelledError):
        await running
    waiting.popen.wait(timeout=10)
    assert await _left(tag) == []


async def test_pipelines_in_flight_hold_no_thread_of_the_loop() -> None:
    """Many sends waiting on slow sandboxes leave the loop's default executor free (model
    calls resolve names there): none of them holds a thread while it waits."""
    slow = [Waiting(["bash", "-c", "sleep 2; cat"], cwd=None, env=os.environ) for _ in range(40)]
    sends = [
        asyncio.create_task(
            run_pipeline(w, ["cat"], second_env=os.environ, stdin=b"x" * 200_000, timeout_s=30)
        )
        for w in slow
    ]
    await asyncio.sleep(0.2)
    async with asyncio.timeout(1.5):  # well before the slow sends end
        assert await asyncio.to_thread(lambda: "free") == "free"
    results = await asyncio.gather(*sends)
    assert all(p.ok and c.ok for p, c in results)


async def test_a_tree_that_keeps_forking_is_killed_whole() -> None:
    """Four loops forking as fast as they can while the tree is frozen and killed: a child
    made by a fork that was under way when its parent was sent SIGSTOP must not escape."""
    for _ in range(5):
        tag = f"keel-test-{uuid.uuid4().hex}"
        loop = f"(while :; do (exec -a {tag} sleep 300) & done)"
        forker = subprocess.Popen(["bash", "-c", f"for k in 1 2 3 4; do {loop} & done; wait"])
        await asyncio.sleep(0.2)
        kill_below(forker.pid)
        forker.wait(timeout=10)
        assert await _left(tag) == []
