"""The outbox dispatcher: sends queued posts through the surfaces, each at most once.

A row is marked ``sending`` (committed) before the surface is called. A row found ``sending``
later may have landed without us hearing back, so the surface is asked for a post carrying
its key before anything is sent again. Progress edits are rate-limited per message, and the
posts of one task land in its thread in the order they were queued (``store.outbox``).
A post the origin keeps refusing as retryable is tried again with backoff for
``deliver_for_s`` (from when it was queued: stored, so across restarts). If the origin refuses
it for good, or that time runs out, the post goes to the fallback: a thread, or a Slack
channel where a task's first post starts a thread and its others go in it. Where it landed
is recorded (``runtime.threads.Landed``); one that cannot land there either is
``undelivered``, which the task's views and ``keel_outbox_undelivered`` show. Rows keep their
references as text, read back by the store; one that does not parse comes back
``Unreadable`` and its post alone is undelivered, instead of the outbox stopping.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Mapping
from datetime import timedelta

from runtime.clock import Clock
from runtime.errors import Permanent, Retryable
from runtime.notifier import Notifier
from runtime.store import outbox
from runtime.store.engine import Database
from runtime.store.outbox import OutboxPost, Unreadable
from runtime.surfaces import ChannelSurface, Surface
from runtime.threads import Fallback, Landed, SlackChannel, ThreadRef

log = logging.getLogger(__name__)

# The longest wait between two tries when the provider names none.
_MAX_BACKOFF_S = 120.0


class OutboxDispatcher:
    def __init__(
        self,
        db: Database,
        surfaces: Mapping[str, Surface],
        clock: Clock,
        *,
        edit_interval_s: float = 3.0,
        fallback: Fallback | None = None,
        notifier: Notifier | None = None,
        deliver_for_s: float = 3600.0,
        on_failure: Callable[[str], None] | None = None,
    ) -> None:
        self.db = db
        self.surfaces = surfaces
        self.clock = clock
        self.edit_interval_s = edit_interval_s
        self.fallback = fallback
        self.notifier = notifier or Notifier()
        self.deliver_for_s = deliver_for_s
        self.failures = 0
        self.on_failure = on_failure or (lambda surface: None)

    async def run(self, stopping: asyncio.Event, poll_s: float = 0.2) -> None:
        self.notifier.bind(asyncio.get_running_loop())
        while not stopping.is_set():
            try:
                sent = await self.run_once()
            except Exception:  # loop boundary: the database may be briefly unavailable
                log.exception("outbox round failed")
                sent = 0
            if not sent:
                await self.notifier.wait(poll_s)

    async def run_once(self, limit: int = 50) -> int:
        now = self.clock.now()
        due = await self.db.read(lambda s: outbox.due_posts(s, now, self.edit_interval_s, limit))
        results = await asyncio.gather(*(self._send(post) for post in due))
        return sum(results)

    async def _send(self, post: OutboxPost) -> int:
        thread, landed = post.thread_ref, post.landed_on
        if isinstance(thread, Unreadable):
            await self._undelivered(post, thread.reason)
            return 0
        if isinstance(landed, Unreadable):
            await self._undelivered(post, landed.reason)
            return 0
        if post.state == "stale" and landed is not None:
            return await self._edit(post, thread, landed)
        surface = self.surfaces.get(thread.surface)
        if surface is None:
            await self._undelivered(post, f"surface {thread.surface!r} is not configured")
            return 0
        try:
            recovering = post.state == "sending"
            # A reaction is idempotent (one already there is success), so it needs no
            # durable "sending" mark to reconcile by: it is simply sent again after a crash.
            # Its tries are counted when one fails.
            if post.action != "react":
                await self.db.run(
                    lambda s: outbox.mark_sending(s, post.outbox_id, post.attempts + 1)
                )
            message = await self._deliver(surface, post, thread, recovering)
        except Retryable as e:
            if self._out_of_time(post):
                return await self._to_fallback(post, thread, self._gave_up(post, e))
            await self._retry(post, e)
            return 0
        except Permanent as e:
            return await self._to_fallback(post, thread, e)
        await self._landed(post, Landed(message))
        return 1

    async def _edit(self, post: OutboxPost, thread: ThreadRef, landed: Landed) -> int:
        """A newer body for a message already posted, sent to wherever that message landed."""
        surface = self.surfaces.get(landed.message.surface)
        if surface is None:
            where = landed.message.surface
            await self._undelivered(post, f"surface {where!r} is not configured")
            return 0
        body = f"{_fallback_note(thread)}\n\n{post.body}" if landed.fallback else post.body
        try:
            await surface.update(landed.message, body, actions=post.actions)
        except Retryable as e:
            if self._out_of_time(post):
                # The message is there, with older text: nothing to fall back to.
                await self._undelivered(post, f"edit of {landed.message}: {self._gave_up(post, e)}")
                return 0
            await self._retry(post, e)
            return 0
        except Permanent as e:
            await self._undelivered(post, f"edit of {landed.message}: {e}")
            return 0
        await self._landed(post, landed)
        return 1

    async def _deliver(
        self, surface: Surface, post: OutboxPost, thread: ThreadRef, recovering: bool
    ) -> ThreadRef:
        if post.action == "react":
            await surface.react(thread, post.body)
            return thread
        if recovering:
            found = await surface.find_post(thread, key=post.key)
            if found is not None:
                return found
        return await surface.post(thread, post.body, key=post.key, actions=post.actions)

    async def _landed(self, post: OutboxPost, where: Landed) -> None:
        now = self.clock.now()
        await self.db.run(
            lambda s: outbox.landed(
                s, post.outbox_id, body=post.body, actions=post.actions, where=where, now=now
            )
        )

    def _out_of_time(self, post: OutboxPost) -> bool:
        return self.clock.now() >= post.deliver_by(self.deliver_for_s)

    def _gave_up(self, post: OutboxPost, error: Retryable) -> Permanent:
        return Permanent(
            f"still failing after {self.deliver_for_s:g} s and {post.attempts + 1} attempts: "
            f"{error}"
        )

    async def _retry(self, post: OutboxPost, error: Retryable) -> None:
        """Try again after the wait the provider asked for, else with exponential backoff,
        and once more when the time to deliver runs out."""
        delay = (
            error.retry_after_s
            if error.retry_after_s is not None
            else min(_MAX_BACKOFF_S, 2.0**post.attempts)
        )
        at = min(
            self.clock.now() + timedelta(seconds=delay), post.deliver_by(self.deliver_for_s)
        )
        # Keep "sending" so the next attempt reconciles before posting again; a reaction,
        # never marked, counts this try here.
        counted = post.attempts + 1 if post.action == "react" else None
        await self.db.run(
            lambda s: outbox.mark_retry(s, post.outbox_id, at, str(error), attempts=counted)
        )

    async def _to_fallback(self, post: OutboxPost, thread: ThreadRef, error: Permanent) -> int:
        fallback = self.fallback
        target = self.surfaces.get(fallback.surface) if fallback else None
        if fallback is None or target is None or post.action == "react":
            await self._undelivered(post, str(error))
            return 0
        text = f"{_fallback_note(thread, error)}\n\n{post.body}"
        try:
            message = await self._post_in_fallback(target, fallback, post, text)
        except (Retryable, Permanent) as e:
            await self._undelivered(post, f"origin: {error}; fallback: {e}")
            return 0
        await self._landed(post, Landed(message, fallback=True))
        return 1

    async def _post_in_fallback(
        self, target: Surface, fallback: Fallback, post: OutboxPost, text: str
    ) -> ThreadRef:
        if not isinstance(fallback, SlackChannel):
            return await target.post(fallback, text, key=post.key)
        started = await self.db.read(
            lambda s: outbox.fallback_thread_in(s, post.task_id, fallback)
        )
        if started is not None:
            return await target.post(started, text, key=post.key)
        if not isinstance(target, ChannelSurface):
            raise Permanent(f"{target.name} cannot start a thread in {fallback}")
        return await target.start_thread(fallback, text, key=post.key)

    async def _undelivered(self, post: OutboxPost, reason: str) -> None:
        self.failures += 1
        self.on_failure(post.surface)
        log.warning(
            "outbox post %s undelivered: %s", post.key, reason, extra={"task_id": post.task_id}
        )
        await self.db.run(
            lambda s: outbox.mark_undelivered(s, post.outbox_id, reason)
        )


def _fallback_note(thread: ThreadRef, error: Exception | None = None) -> str:
    reason = f": {error}" if error is not None else ""
    return f"(Could not post in {thread}{reason})"
