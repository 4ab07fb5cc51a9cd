"""In-process serialisation of lookup-then-create per objective key."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager


class ObjectiveLocks:
    """Two signals for one objective in one burst must not both see "no owner" and both start
    a task; across processes the objective's owner is still settled by the scheduler's answers.
    """

    def __init__(self) -> None:
        self._locks: dict[str, asyncio.Lock] = {}
        self._users: dict[str, int] = {}

    @asynccontextmanager
    async def hold(self, keys: Iterable[str]) -> AsyncIterator[None]:
        ordered = sorted(set(keys))  # one global order, so two holders cannot deadlock
        for key in ordered:
            self._users[key] = self._users.get(key, 0) + 1
        try:
            async with _all(self._locks.setdefault(key, asyncio.Lock()) for key in ordered):
                yield
        finally:
            for key in ordered:
                self._users[key] -= 1
                if not self._users[key]:
                    del self._users[key], self._locks[key]


@asynccontextmanager
async def _all(locks: Iterable[asyncio.Lock]) -> AsyncIterator[None]:
    held: list[asyncio.Lock] = []
    try:
        for lock in locks:
            await lock.acquire()
            held.append(lock)
        yield
    finally:
        for lock in reversed(held):
            lock.release()
