"""Group commit for SQLite: writes that arrive together share one transaction and one fsync.

A batch runs optimistically in one transaction. If any piece of work fails (a stale version,
a unique violation) the whole transaction is rolled back and each piece is run again in a
transaction of its own, so the failure reaches only its own caller and the others commit.
Failures are rare, and a savepoint around every piece would cost more than the rare retry.
A caller's result is released only after the COMMIT holding its work is durable.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import Future, InvalidStateError
from contextlib import AbstractContextManager
from typing import Any

from sqlalchemy.orm import Session

Work = Callable[[Session], Any]
MAX_BATCH = 64


class GroupCommitter:
    def __init__(self, transaction: Callable[[], AbstractContextManager[Session]]) -> None:
        self._transaction = transaction
        self._queue: queue.SimpleQueue[tuple[Work, Future[Any]] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    def submit(self, work: Work) -> Future[Any]:
        done: Future[Any] = Future()
        self._ensure_thread()
        self._queue.put((work, done))
        return done

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
            self._commit(batch)

    def _drain(self) -> Iterator[tuple[Work, Future[Any]]]:
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

    def _commit(self, batch: list[tuple[Work, Future[Any]]]) -> None:
        if len(batch) > 1:
            try:
                with self._transaction() as session:
                    results = [_flushed(session, work(session)) for work, _ in batch]
            except Exception:  # someone's work failed: give each piece its own transaction
                pass
            else:
                for (_, done), result in zip(batch, results, strict=True):
                    _settle(done, result, None)
                return
        for work, done in batch:
            self._commit_alone(work, done)

    def _commit_alone(self, work: Work, done: Future[Any]) -> None:
        try:
            with self._transaction() as session:
                result = work(session)
        except Exception as e:  # this caller's failure only
            _settle(done, None, e)
            return
        _settle(done, result, None)


def _flushed(session: Session, result: Any) -> Any:
    """Each piece's ORM changes reach the database before the next piece runs."""
    session.flush()
    return result


def _settle(done: Future[Any], result: Any, error: BaseException | None) -> None:
    """Hand over the outcome; a caller that stopped waiting (cancelled) simply misses it."""
    if done.cancelled():
        return
    try:
        if error is not None:
            done.set_exception(error)
        else:
            done.set_result(result)
    except InvalidStateError:
        pass
