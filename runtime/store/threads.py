"""Blocking database work for an event loop, on a few threads of its own.

``loop.run_in_executor`` wraps every call in a ``concurrent.futures.Future`` (with its
condition variable) chained to an asyncio future, and asks the executor whether a thread is
idle; for the sub-millisecond transactions the executor runs that costs about as much CPU
as the transaction's own SQLAlchemy work. Here a call is one queue entry, and its result goes
back to the caller's loop with one ``call_soon_threadsafe``: about half the CPU per call.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")
log = logging.getLogger(__name__)

_Job = tuple[asyncio.AbstractEventLoop, "asyncio.Future[Any]", Callable[[], Any]]


class Threads:
    """Up to ``size`` threads, started as calls find none idle."""

    def __init__(
        self,
        size: int,
        name: str,
        *,
        on_idle: Callable[[], None] | None = None,
        idle_s: float = 60.0,
    ) -> None:
        """``on_idle`` runs on a thread that has had no call for ``idle_s`` seconds, once per
        such spell, on that thread: what it releases is that thread's own."""
        self._size = size
        self._name = name
        self._on_idle = on_idle
        self._idle_s = idle_s
        self._queue: queue.SimpleQueue[_Job | None] = queue.SimpleQueue()
        self._idle = threading.Semaphore(0)
        self._threads: list[threading.Thread] = []
        self._lock = threading.Lock()
        self._closed = False

    def call(self, work: Callable[[], T]) -> asyncio.Future[T]:
        """``work()`` on one of the threads; its result (or error) on the running loop."""
        if self._closed:
            raise RuntimeError("the database is closed")
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        self._queue.put((loop, future, work))
        if not self._idle.acquire(blocking=False):
            self._grow()
        return future

    def close(self) -> None:
        """Threads finish the call they are in and stop; a call still queued is not run, its
        caller gets the error a call after closing gets."""
        self._closed = True
        with self._lock:
            for _ in self._threads:
                self._queue.put(None)

    def _grow(self) -> None:
        with self._lock:
            if self._closed or len(self._threads) >= self._size:
                return
            thread = threading.Thread(
                target=self._serve, name=f"{self._name}_{len(self._threads)}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _serve(self) -> None:
        while True:
            job = self._next()
            if job is None:
                return
            loop, future, work = job
            result: Any = None
            error: BaseException | None
            if self._closed:
                error = RuntimeError("the database is closed")
            else:
                try:
                    result, error = work(), None
                except BaseException as e:  # handed to the caller, whatever it is
                    error = e
            # Idle before the caller hears back, so a caller that calls again at once finds
            # this thread instead of starting another.
            self._idle.release()
            # A closed loop (RuntimeError) has nobody waiting any more.
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, future, result, error)
            del job, future, work, result, error

    def _next(self) -> _Job | None:
        if self._on_idle is None:
            return self._queue.get()
        try:
            return self._queue.get(timeout=self._idle_s)
        except queue.Empty:
            try:
                self._on_idle()
            except Exception:  # a release that failed must not end the thread
                log.exception("releasing an idle thread's resources failed")
            return self._queue.get()


def settle(future: asyncio.Future[Any], result: Any, error: BaseException | None) -> None:
    """On the caller's loop: a caller that stopped waiting (cancelled) simply misses it."""
    if future.done():
        return
    if error is not None:
        future.set_exception(error)
    else:
        future.set_result(result)
