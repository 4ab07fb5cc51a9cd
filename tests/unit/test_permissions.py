"""The permission port's cache: one lookup per (repository, login) while fresh."""

from __future__ import annotations

from dataclasses import replace

from routing.permissions import CachedPermissions, Known, needs_permission, with_permission
from routing.signal import Actor
from runtime.threads import GitHubIssue
from tests.factories import make_signal
from tests.unit.test_router_table import github_comment


class Counting:
    def __init__(self) -> None:
        self.asked: list[tuple[str, str]] = []

    async def permission(self, repo: str, login: str) -> str | None:
        self.asked.append((repo, login))
        return "maintain" if login == "mia" else None


async def test_answers_are_reused_until_the_ttl_passes() -> None:
    now = [0.0]
    source = Counting()
    cached = CachedPermissions(source, ttl_s=60, monotonic=lambda: now[0])
    assert await cached.permission("acme/shop", "mia") == "maintain"
    assert await cached.permission("acme/shop", "mia") == "maintain"
    assert await cached.permission("acme/shop", "bob") is None
    assert await cached.permission("acme/shop", "bob") is None  # a "no" is cached too
    now[0] = 61
    await cached.permission("acme/shop", "mia")
    assert source.asked == [("acme/shop", "mia"), ("acme/shop", "bob"), ("acme/shop", "mia")]


async def test_a_recent_answer_is_told_without_asking_until_the_ttl_passes() -> None:
    now = [0.0]
    source = Counting()
    cached = CachedPermissions(source, ttl_s=60, monotonic=lambda: now[0])
    assert cached.recent("acme/shop", "mia") is None
    await cached.permission("acme/shop", "mia")
    await cached.permission("acme/shop", "bob")
    assert cached.recent("acme/shop", "mia") == Known("maintain")
    assert cached.recent("acme/shop", "bob") == Known(None)  # known to have none
    now[0] = 61
    assert cached.recent("acme/shop", "mia") is None
    assert len(source.asked) == 2


def test_only_a_github_person_without_a_known_permission_needs_a_lookup() -> None:
    octo = Actor(id="101", name="octo", is_bot=False, is_self=False)
    asker = github_comment(actor=octo, thread_ref=GitHubIssue("acme/shop", 7))
    assert needs_permission(asker) and asker.repo == "acme/shop"
    assert not needs_permission(with_permission(asker, "write"))
    assert not needs_permission(github_comment(actor=replace(octo, is_self=True)))
    assert not needs_permission(make_signal())  # Slack has no repository permissions
