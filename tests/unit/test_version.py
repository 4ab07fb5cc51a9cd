"""Keel says its version (#41): ``keel --version``, from the one place it is written, which
pyproject.toml reads and CHANGELOG.md's newest release names."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from typer.testing import CliRunner

from adapters.cli import app
from runtime import version
from runtime.version import VERSION

ROOT = Path(__file__).resolve().parents[2]
RELEASE = re.compile(r"^## \[(\d+\.\d+\.\d+)\] - (\d{4}-\d{2}-\d{2})$", re.M)


def test_keel_version_prints_the_version_and_exits_0() -> None:
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.stdout == f"keel {VERSION}\n"


def test_pyproject_takes_its_version_from_runtime_version() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    attr = project["tool"]["setuptools"]["dynamic"]["version"]["attr"]
    assert attr == f"{version.__name__}.VERSION"


def test_the_changelog_newest_release_is_this_version() -> None:
    """Bumping the version asks for its changelog section, newest first."""
    releases = RELEASE.findall((ROOT / "CHANGELOG.md").read_text())
    assert releases, "CHANGELOG.md has no '## [x.y.z] - YYYY-MM-DD' section"
    assert releases[0][0] == VERSION
    numbers = [tuple(int(n) for n in number.split(".")) for number, _ in releases]
    assert numbers == sorted(numbers, reverse=True)
