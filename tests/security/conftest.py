"""Fixtures of the attack suite: secrets in the environment for each module, a host folder no
sandbox can reach for each test, and bubblewrap (skipped locally without it, a failure in CI)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.host import require_bwrap
from tests.security.kit import Host, host_folders, migrated_sqlite, secret_environment


@pytest.fixture(autouse=True, scope="module")
def sentinel() -> Iterator[subprocess.Popen[bytes]]:
    """The secrets, for each module: in this process's environment and in that of a host
    process (yielded: the sentinel)."""
    with secret_environment() as process:
        yield process


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    require_bwrap()


@pytest.fixture
def host() -> Iterator[Host]:
    with host_folders() as folders:
        yield folders


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("keel-db") / "template.db"
    migrated_sqlite(path)
    return path


@pytest.fixture
def sqlite_url(_sqlite_template: Path, tmp_path: Path) -> str:
    """A migrated SQLite database of the test's own (the attacks are not about storage)."""
    copy = tmp_path / "keel.db"
    shutil.copyfile(_sqlite_template, copy)
    return f"sqlite:///{copy}"
