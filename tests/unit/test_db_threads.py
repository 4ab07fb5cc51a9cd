"""The database's hand-off of blocking work: results, errors, parallelism and closing."""

from __future__ import annotations

import asyncio
import threading

import pytest

from runtime.store.threads import Threads


async def test_a_call_returns_its_result_or_raises_its_error_on_the_loop() -> None:
    threads = Threads(2, "t")
    try:
        assert await threads.call(lambda: threading.current_thread().name) == "t_0"

        def fail() -> None:
            raise KeyError("gone")

        with pytest.raises(KeyError, match="gone"):
            await threads.call(fail)
    finally:
        threads.close()


async def test_blocked_calls_run_side_by_side_up_to_the_size() -> None:
    threads = Threads(3, "t")
    gate = threading.Barrier(3, timeout=5)  # passes only once three calls wait at once
    try:
        names = await asyncio.gather(
            *(
                threads.call(lambda: (gate.wait(), threading.current_thread().name)[1])
                for _ in range(3)
            )
        )
        assert sorted(names) == ["t_0", "t_1", "t_2"]
        # Idle threads are reused, never more than the size.
        again = await asyncio.gather(
            *(threads.call(lambda: threading.current_thread().name) for _ in range(20))
        )
        assert set(again) <= {"t_0", "t_1", "t_2"}
    finally:
        threads.close()


async def test_a_caller_that_stopped_waiting_does_not_break_the_thread() -> None:
    threads = Threads(1, "t")
    release = threading.Event()
    try:
        slow = threads.call(release.wait)
        slow.cancel()
        release.set()
        assert await threads.call(lambda: 42) == 42
    finally:
        threads.close()


async def test_a_closed_hand_off_refuses_new_calls() -> None:
    threads = Threads(1, "t")
    await threads.call(lambda: None)
    threads.close()
    with pytest.raises(RuntimeError, match="closed"):
        threads.call(lambda: None)


async def test_closing_ends_calls_still_queued_with_an_error_instead_of_leaving_them_waiting() -> (
    None
):
    threads = Threads(1, "t")
    release = threading.Event()
    running = threads.call(release.wait)
    queued = threads.call(lambda: "never run")
    await asyncio.sleep(0.05)
    threads.close()
    release.set()
    assert await asyncio.wait_for(running, 5) is True
    with pytest.raises(RuntimeError, match="closed"):
        await asyncio.wait_for(queued, 5)


async def test_a_thread_idle_for_a_while_releases_what_it_holds_on_itself_once() -> None:
    released: list[str] = []
    threads = Threads(
        1, "t", on_idle=lambda: released.append(threading.current_thread().name), idle_s=0.1
    )
    try:
        await threads.call(lambda: None)
        await asyncio.sleep(0.5)  # several idle periods: one release for the spell
        assert released == ["t_0"]
        assert await threads.call(lambda: 42) == 42  # the thread still serves
        await asyncio.sleep(0.3)
        assert released == ["t_0", "t_0"]
    finally:
        threads.close()


async def test_a_release_that_fails_leaves_the_thread_serving() -> None:
    def fail() -> None:
        raise OSError("could not close")

    threads = Threads(1, "t", on_idle=fail, idle_s=0.05)
    try:
        await threads.call(lambda: None)
        await asyncio.sleep(0.2)
        assert await threads.call(lambda: 7) == 7
    finally:
        threads.close()
