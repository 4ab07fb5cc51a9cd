"""Wake-ups for workers. A notification is only a hint: claims never depend on one.

The embedded default is in-process; on PostgreSQL, ``runtime.store.listen`` feeds the same
notifier from ``LISTEN keel_ready`` so workers on other machines wake promptly, and the poll
interval is the fallback if a notification is missed.
"""

from __future__ import annotations

import asyncio
import contextlib


class Notifier:
    def __init__(self) -> None:
        self._waiters: set[asyncio.Future[None]] = set()
        self._pending = False
        self._loop: asyncio.AbstractEventLoop | None = None

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop

    def notify(self) -> None:
        """Safe to call from any thread."""
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        self._pending = True
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def wait(self, timeout: float) -> None:
        """Return on the next notification or after ``timeout`` seconds."""
        if self._pending:
            self._pending = False
            return
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.add(waiter)
        try:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, timeout)
        finally:
            self._waiters.discard(waiter)
            self._pending = False
