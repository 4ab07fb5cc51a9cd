"""Group commit for SQLite: writes that arrive together share one transaction and one fsync.

Each piece of work runs in its own SAVEPOINT, so one that fails (a stale version, a unique
violation) is rolled back alone and its caller gets its own exception; the others commit.
A caller's result is released only after the shared COMMIT is durable.
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
        outcomes: list[tuple[Future[Any], Any, BaseException | None]] = []
        try:
            with self._transaction() as session:
                for work, done in batch:
                    outcomes.append((done, *_in_savepoint(session, work)))
        except Exception as e:  # the shared commit failed: nobody's work is durable
            for _, done in batch:
                _settle(done, None, e)
            return
        for done, result, error in outcomes:
            _settle(done, result, error)


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


def _in_savepoint(session: Session, work: Work) -> tuple[Any, BaseException | None]:
    savepoint = session.begin_nested()
    try:
        result = work(session)
        savepoint.commit()
    except Exception as e:  # this caller's failure only; the batch goes on
        savepoint.rollback()
        return None, e
    return result, None
