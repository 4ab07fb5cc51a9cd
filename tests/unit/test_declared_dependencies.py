"""Every third-party module Keel imports comes from a distribution pyproject.toml declares:
the runtime dependencies, or the dev extra for modules only the tests load."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OWN = {"runtime", "routing", "adapters"}
# Loaded only by tests (contract checks of the emulators); jsonschema is in the dev extra.
TEST_ONLY = {Path("adapters/emulators/contract.py")}


def _imports(path: Path) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found - OWN - set(sys.stdlib_module_names) - {"__future__"}


def _imported(*, test_only: bool) -> set[str]:
    paths = (p for package in OWN for p in (ROOT / package).rglob("*.py"))
    chosen = (p for p in paths if (p.relative_to(ROOT) in TEST_ONLY) == test_only)
    return set().union(*map(_imports, chosen))


def _names(specs: list[str]) -> set[str]:
    return {_normal(re.split(r"[\s<>=!~\[;]", spec, maxsplit=1)[0]) for spec in specs}


def _normal(distribution: str) -> str:
    return distribution.lower().replace("_", "-")


def _undeclared(modules: set[str], declared: set[str]) -> dict[str, list[str]]:
    owners = packages_distributions()
    return {
        module: owners.get(module, [])
        for module in modules
        if not {_normal(d) for d in owners.get(module, [])} & declared
    }


def test_every_imported_distribution_is_declared_when_the_package_is_installed() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    runtime = _names(project["dependencies"])
    dev = runtime | _names(project["optional-dependencies"]["dev"])
    assert _undeclared(_imported(test_only=False), runtime) == {}
    assert _undeclared(_imported(test_only=True), dev) == {}
    assert {"requests", "urllib3"} <= runtime
