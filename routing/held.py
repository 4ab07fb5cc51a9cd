"""Held deliveries: the intake's stage for a person's request whose permission is not known
yet. It is authorised off the request path and never dropped silently.

``take`` routes a request at once (in the one transaction every delivery gets) when a recent
lookup already let its asker in; otherwise it holds the delivery in the store
(``runtime/store/held.py``) and the request is answered at once. The intake's retry loop
(``Router.run``, the same loop that resumes pending plans) then resolves each held delivery
as it comes due: it asks the permission source for the person's permission (GitHub's
``role_name``, so triage and maintain rank as themselves), retrying a failing lookup, and
hands the Signal with its permission to the sink.
What routing refuses is answered on the thread:

- a lookup that kept failing gets a reply saying Keel could not verify the permission;
- an unauthorised request gets a short refusal, once per person and thread, unless
  ``unauthorised`` is ``silent``.

Replies are found again by their marker before posting, so a retry never posts twice. A held
delivery survives a restart: the next loop picks it up.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Literal, Protocol

from routing.locks import ObjectiveLocks
from routing.notes import refused_text, unverified_text
from routing.permissions import CachedPermissions, with_permission
from routing.policy import permits
from routing.signal import Ignored, Signal
from runtime.clock import Clock
from runtime.errors import KeelError, Retryable
from runtime.store import held as store
from runtime.store.engine import Database
from runtime.surfaces import Surface

if TYPE_CHECKING:
    from routing.sink import SignalSink

log = logging.getLogger(__name__)

Unauthorised = Literal["reply", "silent"]

# How often the loop looks for held deliveries when nothing woke it: a postponed lookup
# comes due at its time, which no event announces.
POLL_S = 1.0


class Reader(Protocol):
    """How the provider whose deliveries are held reads one back from the store."""

    provider: str

    def translate(
        self, event: str, delivery_id: str, payload: dict[str, Any], received_at: datetime
    ) -> Signal | Ignored:
        """The delivery as routing sees it."""
        ...

    def raw_kind(self, event: str, payload: dict[str, Any]) -> str:
        """The kind recorded for a delivery routing ignores (e.g. ``issues.closed``)."""
        ...


class HeldDeliveries:
    """Held deliveries → permission → routing, with a visible answer to every refusal."""

    def __init__(
        self,
        db: Database,
        sink: SignalSink,
        permissions: CachedPermissions,
        clock: Clock,
        reader: Reader,
        *,
        surface: Surface | None = None,
        min_permission: str = "write",
        unauthorised: Unauthorised = "reply",
        retry_delays_s: tuple[float, ...] = (2.0, 10.0, 30.0, 120.0),
        lookup_timeout_s: float = 30.0,
        max_in_flight: int = 16,  # as many as the client has lookup threads
    ) -> None:
        self.db = db
        self.sink = sink
        self.permissions = permissions
        self.clock = clock
        self.reader = reader
        self.surface = surface
        self.min_permission = min_permission
        self.unauthorised = unauthorised
        self.retry_delays_s = retry_delays_s
        self.lookup_timeout_s = lookup_timeout_s
        self.max_in_flight = max_in_flight
        self.wake = asyncio.Event()  # set when a delivery is held or one in flight ends
        self._in_flight: dict[str, asyncio.Task[None]] = {}
        self._reply_locks = ObjectiveLocks()  # one per thread and reply, gone when released

    async def take(
        self, signal: Signal, event: str, delivery_id: str, payload: dict[str, Any]
    ) -> None:
        """A person's request, on the request path: routed at once (in the one transaction
        every delivery gets) when a recent lookup says they may ask, otherwise held for the
        lookup. A refusal is always held, so it is answered off the request path."""
        known = self.permissions.recent(signal.repo, signal.actor.name) if signal.repo else None
        # Without a recent answer that lets them ask, the held path decides, as ever.
        if known is None or not permits(known.permission, self.min_permission):
            await self.hold(event, delivery_id, payload)
            return
        await self.sink.accept(
            with_permission(signal, known.permission),
            provider=self.reader.provider,
            delivery_id=delivery_id,
            raw_kind=self.reader.raw_kind(event, payload),
        )

    async def hold(self, event: str, delivery_id: str, payload: dict[str, Any]) -> None:
        """Store the delivery (the request path's only work) and wake the resolver."""
        now = self.clock.now()
        await self.db.run(lambda s: store.hold(s, delivery_id, event, payload, now))
        self.wake.set()

    async def start_due(self) -> None:
        """Start resolving the held deliveries that are due, up to ``max_in_flight`` at
        once: a lookup the provider is slow to answer holds only its own delivery. The
        intake's loop (``Router.run``) calls this whenever ``wake`` is set, and every
        ``POLL_S``."""
        self.wake.clear()
        try:
            await self._start_due()
        except Exception:  # the database is away: the loop tries again shortly
            log.exception("held deliveries: reading them failed")

    async def stop(self) -> None:
        """Cancel the lookups in flight; their deliveries stay held in the database, and
        the next start resolves them."""
        for running in self._in_flight.values():
            running.cancel()
        await asyncio.gather(*self._in_flight.values(), return_exceptions=True)

    async def _start_due(self) -> None:
        room = self.max_in_flight - len(self._in_flight)
        if room <= 0:
            return
        now = self.clock.now()
        # Those in flight are still due (held until resolved): read past them.
        held = await self.db.run(lambda s: store.due(s, now, self.max_in_flight))
        for item in held:
            if item.delivery_id in self._in_flight or room <= 0:
                continue
            room -= 1
            running = asyncio.create_task(self._resolve_logged(item))
            self._in_flight[item.delivery_id] = running
            running.add_done_callback(functools.partial(self._finished, item.delivery_id))

    def _finished(self, delivery_id: str, _: asyncio.Task[None]) -> None:
        self._in_flight.pop(delivery_id, None)
        self.wake.set()

    async def _resolve_logged(self, held: store.HeldDelivery) -> None:
        try:
            await self._resolve(held)
        except Exception:
            log.exception("held delivery %s", held.delivery_id)

    async def _resolve(self, held: store.HeldDelivery) -> None:
        outcome = self.reader.translate(
            held.event, held.delivery_id, held.payload, held.received_at
        )
        unverified = False
        if isinstance(outcome, Signal) and outcome.repo is not None:
            try:
                found = await asyncio.wait_for(
                    self.permissions.permission(outcome.repo, outcome.actor.name),
                    self.lookup_timeout_s,
                )
            except (KeelError, TimeoutError) as e:
                if held.attempts < len(self.retry_delays_s):
                    await self._postpone(held, e)
                    return
                log.warning(
                    "permission of %s on %s unknown after %d tries: %s",
                    outcome.actor.name, outcome.repo, held.attempts + 1, e,
                )
                unverified = True
            else:
                outcome = with_permission(outcome, found)
        try:
            result = await self.sink.accept(
                outcome,
                provider=self.reader.provider,
                delivery_id=held.delivery_id,
                raw_kind=self.reader.raw_kind(held.event, held.payload),
            )
            if (
                isinstance(outcome, Signal)
                and result.decision == "drop"
                and result.reason == "unauthorised"
            ):
                await self._answer_refusal(outcome, unverified=unverified)
        except (KeelError, OSError) as e:  # the store or the provider is away: keep it held
            await self._postpone(held, e, count=False)
            return
        await self.db.run(lambda s: store.release(s, held.delivery_id))

    async def _postpone(
        self, held: store.HeldDelivery, error: BaseException, *, count: bool = True
    ) -> None:
        attempts = held.attempts + 1 if count else held.attempts
        delays = self.retry_delays_s or (1.0,)
        delay = delays[min(held.attempts, len(delays) - 1)]  # the n-th retry waits delays[n]
        next_at = self.clock.now() + timedelta(seconds=delay)
        text = f"{type(error).__name__}: {error}"
        await self.db.run(
            lambda s: store.postpone(s, held.delivery_id, attempts, next_at, text)
        )

    async def _answer_refusal(self, signal: Signal, *, unverified: bool) -> None:
        # Held requests are people's comments and openings in a repository's issue or pull
        # request, which ``thread_ref.root`` names.
        repo = signal.repo
        if self.surface is None or repo is None:
            return
        thread, login = signal.thread_ref.root, signal.actor.name
        if unverified:
            key = f"unverified:{signal.delivery_id}"
            text = unverified_text(login, repo)
        elif self.unauthorised == "reply":
            key = f"refused:{login.lower()}"  # once per person per thread
            text = refused_text(login, repo, self.min_permission)
        else:
            return
        # Two requests of one person in one thread resolve at once: one reply between them.
        async with self._reply_locks.hold([f"{thread}:{key}"]):
            try:
                if await self.surface.find_post(thread, key=key) is not None:
                    return
                await self.surface.post(thread, text, key=key)
            except Retryable:
                raise
            except KeelError as e:
                log.warning("could not answer %s on %s: %s", login, thread, e)
