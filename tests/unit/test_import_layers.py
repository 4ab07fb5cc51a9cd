"""The dependency rule: adapters -> routing -> runtime, never back."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FORBIDDEN = {"runtime": {"routing", "adapters"}, "routing": {"adapters"}}


def _imported_packages(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_never_imports_outward_when_parsed(package: str) -> None:
    files = sorted((ROOT / package).rglob("*.py"))
    assert files, f"no sources found for {package}"
    offenders = [
        f"{path.relative_to(ROOT)} imports {sorted(bad)}"
        for path in files
        if (bad := _imported_packages(path) & FORBIDDEN[package])
    ]
    assert offenders == []


def test_parser_sees_outward_import_when_one_is_present(tmp_path: Path) -> None:
    sample = tmp_path / "x.py"
    sample.write_text("from adapters.web import app\nimport routing.router\n")
    assert {"adapters", "routing"} <= _imported_packages(sample)


def test_only_runtime_store_imports_sqlalchemy_when_parsed() -> None:
    offenders = [
        str(path.relative_to(ROOT))
        for package in ("runtime", "routing")
        for path in sorted((ROOT / package).rglob("*.py"))
        if "store" not in path.relative_to(ROOT).parts and "sqlalchemy" in _imported_packages(path)
    ]
    assert offenders == []
