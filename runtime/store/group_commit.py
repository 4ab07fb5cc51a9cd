"""Group commit for SQLite: writes that arrive together share one transaction and one fsync.

A batch runs optimistically in one transaction. If any piece of work fails (a stale version,
a unique violation) the whole transaction is rolled back and each piece is run again in a
transaction of its own, so the failure reaches only its own caller and the others commit.
Failures are rare, and a savepoint around every piece would cost more than the rare retry.

A caller's result is released only after the COMMIT holding its work is durable, to each
event loop in one hand-over per batch: every cross-thread wake-up costs the committer a
round trip for the interpreter lock, which is worth more than the work of a small write.
"""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from runtime.store.threads import settle

Work = Callable[[Session], Any]
MAX_BATCH = 64


@dataclass(frozen=True, slots=True)
class _Request:
    work: Work
    loop: asyncio.AbstractEventLoop
    done: asyncio.Future[Any]


Outcome = tuple[asyncio.Future[Any], Any, BaseException | None]


class GroupCommitter:
    def __init__(self, transaction: Callable[[], AbstractContextManager[Session]]) -> None:
        self._transaction = transaction
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    async def run(self, work: Work) -> Any:
        """Run ``work`` in a shared transaction; its result once that commit is durable."""
        loop = asyncio.get_running_loop()
        done: asyncio.Future[Any] = loop.create_future()
        self._ensure_thread()
        self._queue.put(_Request(work, loop, done))
        return await done

    def close(self) -> None:
        if self._thread is not None:
            self._queue.put(None)
            self._thread.join(timeout=5)

    def _ensure_thread(self) -> None:
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._loop, name="keel-commit", daemon=True)
                self._thread.start()

    def _loop(self) -> None:
        while True:
            batch = list(self._drain())
            if not batch:
                return
            _hand_over(batch, self._commit(batch))

    def _drain(self) -> Iterator[_Request]:
        first = self._queue.get()
        if first is None:
            return
        yield first
        for _ in range(MAX_BATCH - 1):
            try:
                item = self._queue.get_nowait()
            except queue.Empty:
                return
            if item is None:
                self._queue.put(None)  # stop after this batch
                return
            yield item

    def _commit(self, batch: list[_Request]) -> list[tuple[Any, BaseException | None]]:
        if len(batch) > 1:
            try:
                with self._transaction() as session:
                    return [(_flushed(session, r.work(session)), None) for r in batch]
            except Exception:  # someone's work failed: give each piece its own transaction
                pass
        return [self._commit_alone(request.work) for request in batch]

    def _commit_alone(self, work: Work) -> tuple[Any, BaseException | None]:
        try:
            with self._transaction() as session:
                return work(session), None
        except Exception as e:  # this caller's failure only
            return None, e


def _flushed(session: Session, result: Any) -> Any:
    """Each piece's ORM changes reach the database before the next piece runs."""
    session.flush()
    return result


def _hand_over(batch: list[_Request], results: list[tuple[Any, BaseException | None]]) -> None:
    by_loop: dict[asyncio.AbstractEventLoop, list[Outcome]] = {}
    for request, (result, error) in zip(batch, results, strict=True):
        by_loop.setdefault(request.loop, []).append((request.done, result, error))
    for loop, outcomes in by_loop.items():
        # A closed loop (RuntimeError) has nobody waiting any more.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(_settle, outcomes)


def _settle(outcomes: list[Outcome]) -> None:
    for done, result, error in outcomes:
        settle(done, result, error)
