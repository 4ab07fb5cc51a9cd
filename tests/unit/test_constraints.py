"""constraints.txt pins what CI and the image install, within the ranges pyproject.toml
declares; every install of the project (make, the image, the install check) goes through it."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = ROOT / "constraints.txt"


def declared() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    specs = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return [Requirement(spec) for spec in specs]


def pins(text: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for line in text.splitlines():
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        name, sep, version = line.partition("==")
        assert sep and version, f"not an exact pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in found, f"{name} is pinned twice"
        found[key] = version
    return found


def unpinned(text: str) -> list[str]:
    """Each dependency pyproject declares that the constraints leave out or pin outside its
    range, described."""
    pinned = pins(text)
    problems = []
    for req in declared():
        version = pinned.get(canonicalize_name(req.name))
        if version is None:
            problems.append(f"{req.name} is not pinned")
        elif not req.specifier.contains(version, prereleases=True):
            problems.append(f"{req.name}=={version} is outside pyproject's {req.specifier}")
    return problems


def test_every_declared_dependency_is_pinned_within_its_range() -> None:
    assert unpinned(CONSTRAINTS.read_text()) == [], "refresh it: make constraints"


def test_a_missing_or_out_of_range_pin_is_named() -> None:
    text = CONSTRAINTS.read_text()
    without = re.sub(r"(?m)^sqlalchemy==.*\n", "", text)
    assert unpinned(without) == ["sqlalchemy is not pinned"]
    old = re.sub(r"(?m)^httpx==.*$", "httpx==0.20.0", text)
    assert unpinned(old) == ["httpx==0.20.0 is outside pyproject's >=0.27"]


def test_the_generator_pins_every_declared_dependency_as_installed_here() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / ".ci" / "freeze-constraints")],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode == 0, done.stderr
    assert unpinned(done.stdout) == []
    from importlib.metadata import version

    assert pins(done.stdout)["pyyaml"] == version("PyYAML")


@pytest.mark.parametrize(
    ("path", "install"),
    [
        ("Makefile", r"pip install .*-c constraints\.txt -e '\.\[dev\]'"),
        ("deploy/Dockerfile", r"pip install .*-c constraints\.txt \."),
        (".ci/install-check", r'-c "\$scratch/src/constraints\.txt" "\$scratch/src"'),
    ],
)
def test_each_install_of_the_project_uses_the_constraints(path: str, install: str) -> None:
    text = (ROOT / path).read_text()
    assert re.search(install, text), f"{path} installs Keel without constraints.txt"
    if path == "deploy/Dockerfile":  # the file must be in the image's build folder
        assert re.search(r"(?m)^COPY .*\bconstraints\.txt\b", text)
