"""The shape the code keeps (issue #40): no import cycles, providers that do not reach up into
the web app, and intake and store modules a newcomer can read in one sitting."""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("runtime", "routing", "adapters")
# Where the limits hold: the intake and the store, the two places every change used to land.
BOUNDED = ("routing", "runtime/store")
MAX_MODULE_LINES = 400
MAX_CLASS_LINES = 250


def _sources(root: Path, folder: str) -> Iterator[Path]:
    for path in sorted((root / folder).rglob("*.py")):
        if "migrations" not in path.relative_to(root).parts:
            yield path


def _module_name(root: Path, path: Path) -> str:
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def _type_checking_only(tree: ast.Module) -> set[int]:
    hidden: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            hidden.update(id(inner) for part in node.body for inner in ast.walk(part))
    return hidden


def import_graph(root: Path, packages: tuple[str, ...] = PACKAGES) -> dict[str, set[str]]:
    """Module -> the modules of ``packages`` it imports at run time (anywhere in the file;
    ``if TYPE_CHECKING:`` blocks left out). ``from pkg import sub`` counts as importing
    ``pkg.sub`` when that is a module."""
    paths = {_module_name(root, p): p for pkg in packages for p in _sources(root, pkg)}
    graph: dict[str, set[str]] = {name: set() for name in paths}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(), filename=str(path))
        hidden = _type_checking_only(tree)
        for node in ast.walk(tree):
            if id(node) in hidden:
                continue
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names]
                known = [sub for sub in subs if sub in paths]
                targets = known if len(known) == len(subs) else [node.module, *known]
            graph[name].update(t for t in targets if t in paths and t != name)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for following in sorted(graph.get(node, ())):
            if following not in index:
                visit(following)
                low[node] = min(low[node], low[following])
            elif following in on_stack:
                low[node] = min(low[node], index[following])
        if low[node] == index[node]:
            group: list[str] = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


@pytest.fixture(scope="module")
def keel_graph() -> dict[str, set[str]]:
    return import_graph(ROOT)


def test_no_module_imports_itself_back_through_others_when_parsed(
    keel_graph: dict[str, set[str]],
) -> None:
    assert cycles(keel_graph) == []


def test_cycle_is_found_when_two_modules_import_each_other(tmp_path: Path) -> None:
    (tmp_path / "runtime").mkdir()
    (tmp_path / "runtime" / "a.py").write_text("from runtime.b import x\n")
    (tmp_path / "runtime" / "b.py").write_text("import runtime.a\n")
    (tmp_path / "runtime" / "c.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from runtime.a import y\n"
    )
    (tmp_path / "runtime" / "d.py").write_text("from runtime.c import z\n")

    assert cycles(import_graph(tmp_path, ("runtime",))) == [["runtime.a", "runtime.b"]]


@pytest.mark.parametrize("provider", ["slack", "github"])
def test_provider_adapters_never_import_the_web_app_when_parsed(
    provider: str, keel_graph: dict[str, set[str]]
) -> None:
    offenders = sorted(
        f"{name} -> {target}"
        for name, targets in keel_graph.items()
        if name.startswith(f"adapters.{provider}")
        for target in targets
        if target.startswith("adapters.web")
    )
    assert offenders == []


def _too_long(folder: str) -> list[str]:
    found: list[str] = []
    for path in _sources(ROOT, folder):
        text = path.read_text()
        where = path.relative_to(ROOT)
        if (lines := len(text.splitlines())) > MAX_MODULE_LINES:
            found.append(f"{where}: {lines} lines")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.ClassDef):
                assert node.end_lineno is not None
                if (size := node.end_lineno - node.lineno + 1) > MAX_CLASS_LINES:
                    found.append(f"{where}:{node.name}: {size} lines")
    return found


@pytest.mark.parametrize("folder", BOUNDED)
def test_intake_and_store_modules_stay_readable_when_measured(folder: str) -> None:
    assert _too_long(folder) == []
