"""GitHub repository names come from the configured key; the URL is only where to clone from."""

from __future__ import annotations

from pathlib import Path

import pytest

from adapters.assembly import Keel
from adapters.config import build_config
from runtime.errors import Permanent
from runtime.store.records import TaskSpec

REPOSITORIES = {
    "acme/widgets": {"url": "git@github.com:someone-else/fork-of-widgets.git"},
    "acme/mirrored": {"url": "https://git.internal.example/mirrors/github/mirror-7.git"},
    "acme/local": {"url": "/srv/git/other-org/other.git"},
    "shop": {"url": "git@github.com:acme/shop.git"},
}


@pytest.fixture
async def keel(db_url: str, tmp_path: Path) -> Keel:
    tree = {
        "database": {"url": db_url},
        "workspace": {"root": str(tmp_path / "ws"), "repositories": REPOSITORIES},
    }
    return Keel(build_config(tree, env={}))


async def _name_for(keel: Keel, repo: str) -> str:
    spec = TaskSpec(agent="default", message="fix it", repo=repo)
    task = (await keel.scheduler.transact(keel.scheduler.schedule, spec)).task
    return await keel.checkouts.repo_full_name(task.task_id)


@pytest.mark.parametrize("key", ["acme/widgets", "acme/mirrored", "acme/local"])
async def test_github_name_is_the_configured_key_whatever_the_clone_url(
    keel: Keel, key: str
) -> None:
    try:
        assert await _name_for(keel, key) == key
    finally:
        keel.db.close()


async def test_a_key_that_is_not_owner_name_is_refused_with_a_clear_error(keel: Keel) -> None:
    try:
        with pytest.raises(Permanent, match=r"'shop' has no GitHub name: key it as owner/name"):
            await _name_for(keel, "shop")  # never guessed from the SSH URL's acme/shop
    finally:
        keel.db.close()
