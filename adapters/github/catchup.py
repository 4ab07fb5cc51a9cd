"""Missed-delivery catch-up: GitHub never redelivers a failed webhook by itself, so Keel asks.

With App auth, ``run`` lists the App's webhook deliveries (``GET /app/hook/deliveries``,
newest first, paged by cursor, no further back than GitHub keeps them: three days) and, for
each GUID whose every attempt failed and that Keel never stored (routed or held), asks for a
redelivery of its newest attempt (``POST /app/hook/deliveries/{id}/attempts``). Each request
is recorded in the database before the next, so a restart never asks twice for one GUID; the
redelivery then arrives as a normal webhook and is deduplicated by its GUID like any other.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from adapters.github.errors import translate_github_error
from adapters.github.installations import Installations
from runtime.clock import Clock
from runtime.errors import KeelError
from runtime.store import github as store
from runtime.store.engine import Database

log = logging.getLogger(__name__)

GITHUB_KEEPS = timedelta(days=3)
_PER_PAGE = 100
_MAX_PAGES = 200


@dataclass(frozen=True, slots=True)
class Attempt:
    hook_id: int
    guid: str
    delivered_at: datetime
    status_code: int

    @property
    def ok(self) -> bool:
        return 200 <= self.status_code < 300


class CatchUp:
    """The periodic job; ``run_once`` is one pass (what tests and ``run`` call)."""

    def __init__(
        self,
        db: Database,
        installations: Installations,
        clock: Clock,
        *,
        interval_s: float = 300.0,
        settle_s: float = 60.0,
        on_request: Callable[[], None] | None = None,
    ) -> None:
        self.db = db
        self.installations = installations
        self.clock = clock
        self.interval_s = interval_s
        # A delivery this recent may still be in flight (or being answered): left for later.
        self.settle_s = settle_s
        self.on_request = on_request
        self.requested = 0
        self._lock = asyncio.Lock()

    async def run(self, stopping: asyncio.Event) -> None:
        while not stopping.is_set():
            try:
                await self.run_once()
            except KeelError as e:
                log.warning("github catch-up: %s", e)
            except Exception:
                log.exception("github catch-up failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stopping.wait(), timeout=self.interval_s)

    async def run_once(self) -> list[str]:
        """One pass; the GUIDs whose redelivery was requested."""
        now = self.clock.now()
        async with self._lock:
            return await self._pass(now)

    async def _pass(self, now: datetime) -> list[str]:
        attempts = await asyncio.to_thread(self._list, now - GITHUB_KEEPS)
        by_guid: dict[str, list[Attempt]] = {}
        for attempt in attempts:
            by_guid.setdefault(attempt.guid, []).append(attempt)
        settled = now - timedelta(seconds=self.settle_s)
        failed = {
            guid: max(tries, key=lambda a: (a.delivered_at, a.hook_id))
            for guid, tries in by_guid.items()
            if not any(a.ok for a in tries) and max(a.delivered_at for a in tries) <= settled
        }
        if not failed:
            return []
        known = await self.db.read(lambda s: store.known_deliveries(s, failed))
        asked = await self.db.read(lambda s: store.requested_guids(s, failed))
        requested = []
        for guid, newest in sorted(failed.items(), key=lambda item: item[1].delivered_at):
            if guid in known or guid in asked or not await self._claim(newest):
                continue
            try:
                await asyncio.to_thread(self._redeliver, newest.hook_id)
            except KeelError:
                await self.db.run(functools.partial(store.unclaim_redelivery, guid=guid))
                raise
            requested.append(guid)
            self.requested += 1
            if self.on_request is not None:
                self.on_request()
        if requested:
            log.info("github catch-up: asked GitHub to redeliver %d deliveries", len(requested))
        return requested

    async def _claim(self, attempt: Attempt) -> bool:
        """Claim the GUID in the database first: only the claimant asks GitHub."""
        stamp = self.clock.now()
        return await self.db.run(
            lambda s: store.claim_redelivery(
                s, attempt.hook_id, attempt.guid, attempt.delivered_at, stamp
            )
        )

    def _list(self, oldest: datetime) -> list[Attempt]:
        requester = self.installations.integration.requester
        found: list[Attempt] = []
        parameters: dict[str, Any] = {"per_page": _PER_PAGE}
        for _ in range(_MAX_PAGES):
            headers, data = _checked(
                functools.partial(
                    requester.requestJsonAndCheck,
                    "GET",
                    "/app/hook/deliveries",
                    parameters=parameters,
                )
            )
            page = [_attempt(item) for item in data or []]
            found.extend(a for a in page if a.delivered_at >= oldest)
            cursor = _next_cursor(headers.get("link") or headers.get("Link") or "")
            if cursor is None or not page or page[-1].delivered_at < oldest:
                break
            parameters = {"per_page": _PER_PAGE, "cursor": cursor}
        return found

    def _redeliver(self, hook_id: int) -> None:
        requester = self.installations.integration.requester
        _checked(
            lambda: requester.requestJsonAndCheck(
                "POST", f"/app/hook/deliveries/{hook_id}/attempts"
            )
        )


def _checked(call: Callable[[], Any]) -> Any:
    from github import GithubException  # only once a call is made (idle RSS, #19)

    try:
        return call()
    except GithubException as e:
        raise translate_github_error(e) from e


def _attempt(item: dict[str, Any]) -> Attempt:
    delivered = datetime.fromisoformat(str(item["delivered_at"]).replace("Z", "+00:00"))
    return Attempt(
        hook_id=int(item["id"]),
        guid=str(item["guid"]),
        delivered_at=delivered.astimezone(UTC),
        status_code=int(item.get("status_code") or 0),
    )


def _next_cursor(link: str) -> str | None:
    """The ``cursor`` of the ``rel="next"`` link, if there is one."""
    for part in link.split(","):
        if 'rel="next"' not in part:
            continue
        url = part.split(";")[0].strip().strip("<>")
        for pair in url.partition("?")[2].split("&"):
            key, _, value = pair.partition("=")
            if key == "cursor":
                return value
    return None
