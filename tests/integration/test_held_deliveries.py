"""The intake's one retry loop and its held stage, on a real database (SQLite and PostgreSQL):
``Router.run`` resolves held deliveries (GitHub's, held for a permission lookup) as it resumes
pending plans; ``keel worker``'s loop, without the stage, leaves them held for ``keel serve``.

Fakes sit only at routing's own ports: the permission source, the reader and the surface.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from collections.abc import Set as AbstractSet
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any

from sqlalchemy import func, select

from routing.config import DaemonsConfig, RoutingConfig
from routing.held import HeldDeliveries
from routing.intake import Router
from routing.permissions import CachedPermissions
from routing.policy import RoutingPolicy
from routing.signal import Actor, Ignored, Signal
from routing.sink import RoutedSink
from runtime.clock import SystemClock
from runtime.errors import Retryable
from runtime.scheduler import Scheduler
from runtime.store.engine import Database
from runtime.store.models import GitHubInboxRow, SignalRow
from runtime.threads import GitHubIssue
from tests.harness import until
from tests.integration.test_outbox import FakeSurface

REPO = "acme/api"
ISSUE = GitHubIssue(REPO, 7)


class Reader:
    """Reads a held delivery back as a comment of ``payload["login"]`` asking Keel on ISSUE."""

    provider = "github"

    def translate(
        self, event: str, delivery_id: str, payload: dict[str, Any], received_at: datetime
    ) -> Signal | Ignored:
        return Signal(
            provider="github",
            delivery_id=delivery_id,
            kind="issue_comment",
            thread_ref=ISSUE.comment(payload["comment"]),
            objective_key=str(ISSUE),
            actor=Actor(id=payload["login"], name=payload["login"], is_bot=False, is_self=False),
            text="@keel fix it",
            addresses_bot=True,
            command=None,
            links=(),
            received_at=received_at,
            dedupe_key=f"github:{REPO}:comment:{payload['comment']}",
            event_action="created",
            event=event,
            message=ISSUE.comment(payload["comment"]),
        )

    def raw_kind(self, event: str, payload: dict[str, Any]) -> str:
        return f"{event}.created"


class Permissions:
    """Each login's permission; ``failing`` logins make the lookup fail, ``stuck`` never answer."""

    def __init__(
        self,
        known: dict[str, str],
        *,
        failing: AbstractSet[str] = frozenset(),
        stuck: AbstractSet[str] = frozenset(),
    ) -> None:
        self.known = known
        self.failing = set(failing)
        self.stuck = set(stuck)
        self.asked: list[str] = []

    async def permission(self, repo: str, login: str) -> str | None:
        self.asked.append(login)
        if login in self.stuck:
            await asyncio.Event().wait()
        if login in self.failing:
            raise Retryable("GitHub did not answer")
        return self.known.get(login)


class Latency:
    def observe_ack(self, seconds: float, provider: str) -> None:
        pass


def _intake(
    database: Database, permissions: Permissions
) -> tuple[Router, HeldDeliveries, FakeSurface]:
    """The router with its held stage, which replies on ``surface``."""
    clock = SystemClock()
    policy = RoutingPolicy.from_config(RoutingConfig(), DaemonsConfig())
    router = Router(Scheduler(database, clock=clock), database, policy, clock, retry_delays=(0,))
    surface = FakeSurface(name="github")
    held = HeldDeliveries(
        database,
        RoutedSink(router, Latency()),
        CachedPermissions(permissions),
        router.clock,
        Reader(),
        surface=surface,
        retry_delays_s=(0.0, 0.0),
    )
    return router, held, surface


async def _held_count(database: Database) -> int:
    query = select(func.count()).select_from(GitHubInboxRow)
    return int(await database.read(lambda s: s.execute(query).scalar_one()))


async def _nothing_held(database: Database) -> bool:
    return await _held_count(database) == 0


async def _asked(permissions: Permissions, logins: list[str]) -> bool:
    return permissions.asked == logins


async def _decisions(database: Database) -> list[tuple[str, str | None]]:
    rows = await database.read(lambda s: list(s.scalars(select(SignalRow))))
    return sorted((r.decision, r.reason) for r in rows)


@asynccontextmanager
async def _running(router: Router, held: HeldDeliveries | None) -> AsyncIterator[None]:
    stopping = asyncio.Event()
    loop = asyncio.create_task(router.run(stopping, held=held))
    try:
        yield
    finally:
        stopping.set()
        await asyncio.wait_for(loop, 10)


async def _route_all(
    database: Database, router: Router, held: HeldDeliveries, *also: tuple[str, str, int]
) -> None:
    """Run the intake's loop until nothing is held, holding ``also`` (delivery id, login,
    comment) while it runs."""
    async with _running(router, held):
        for delivery_id, login, comment in also:
            await held.hold("issue_comment", delivery_id, {"login": login, "comment": comment})
        await until(lambda: _nothing_held(database))


async def test_held_deliveries_are_routed_by_the_intake_loop_and_refusals_answered_once(
    database: Database,
) -> None:
    router, held, surface = _intake(database, Permissions({"mia": "write", "rita": "read"}))
    # Held before the loop starts, as across a restart.
    await held.hold("issue_comment", "d-mia", {"login": "mia", "comment": 1})
    await held.hold("issue_comment", "d-rita-1", {"login": "rita", "comment": 2})

    await _route_all(database, router, held, ("d-rita-2", "rita", 3))

    assert await _decisions(database) == [
        ("drop", "unauthorised"),
        ("drop", "unauthorised"),
        ("new_task", None),
    ]
    assert [(thread, key) for thread, _, key in surface.posts] == [(ISSUE, "refused:rita")]
    assert "at least write permission on acme/api" in surface.posts[0][1]


async def test_a_lookup_that_keeps_failing_is_retried_then_answered_as_unverified(
    database: Database,
) -> None:
    permissions = Permissions({}, failing={"wes"})
    router, held, surface = _intake(database, permissions)

    await _route_all(database, router, held, ("d-wes", "wes", 4))

    assert permissions.asked == ["wes"] * 3  # tried, then once per retry delay
    assert await _decisions(database) == [("drop", "unauthorised")]
    [(thread, text, key)] = surface.posts
    assert (thread, key) == (ISSUE, "unverified:d-wes")
    assert text.startswith("Keel could not verify wes's permission on acme/api")


async def test_stopping_leaves_a_lookup_in_flight_held_and_a_loop_without_the_stage_too(
    database: Database,
) -> None:
    permissions = Permissions({}, stuck={"sam"})
    router, held, surface = _intake(database, permissions)

    async with _running(router, held):
        await held.hold("issue_comment", "d-sam", {"login": "sam", "comment": 5})
        await until(lambda: _asked(permissions, ["sam"]))
    permissions.stuck.clear()
    async with _running(router, None):  # keel worker: pending plans only
        await asyncio.sleep(0.2)

    assert await _held_count(database) == 1
    assert await _decisions(database) == [] and surface.posts == []
