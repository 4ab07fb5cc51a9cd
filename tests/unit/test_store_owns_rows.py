"""Only runtime/store changes ORM rows: elsewhere a row may be read, never written. And
only ``runtime/store/inserts.py`` spells an insert that ignores conflicts.

Parsed, not imported: outside the store, no assignment (plain, augmented, annotated or a
``del``) to an attribute that is a mapped column of a store model, no ``setattr`` or
``delattr`` on anything but ``self``, and no construction of a ``…Row``. The emulators are
left out: they are stand-in providers with their own in-memory records, and never import
the store (checked too).
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from runtime.store.models import Base

ROOT = Path(__file__).resolve().parents[2]
STORE = ROOT / "runtime" / "store"
EMULATORS = ROOT / "adapters" / "emulators"
COLUMNS = frozenset(
    attribute.key for mapper in Base.registry.mappers for attribute in mapper.column_attrs
)
ROWS = frozenset(mapper.class_.__name__ for mapper in Base.registry.mappers)


def _targets(node: ast.AST) -> list[ast.expr]:
    match node:
        case ast.Assign(targets=targets) | ast.Delete(targets=targets):
            return list(targets)
        case ast.AugAssign(target=target) | ast.AnnAssign(target=target, value=ast.expr()):
            return [target]
    return []


def _flattened(targets: list[ast.expr]) -> Iterator[ast.expr]:
    for target in targets:
        if isinstance(target, ast.Tuple | ast.List):
            yield from _flattened(list(target.elts))
        else:
            yield target


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id in ("self", "cls")


def _writes_a_row(node: ast.AST) -> bool:
    if any(
        isinstance(target, ast.Attribute) and target.attr in COLUMNS and not _is_self(target.value)
        for target in _flattened(_targets(node))
    ):
        return True
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        name, args = node.func.id, node.args
        if name in ("setattr", "delattr"):
            return not (args and _is_self(args[0]))
        return name in ROWS
    return False


def row_writes(source: str) -> list[str]:
    """Each place in ``source`` that writes a row, as ``line: code``."""
    return [
        f"{node.lineno}: {ast.unparse(node)}"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.stmt | ast.expr) and _writes_a_row(node)
    ]


def _sources_outside_the_store() -> Iterator[Path]:
    for package in ("runtime", "routing", "adapters"):
        for path in sorted((ROOT / package).rglob("*.py")):
            if not path.is_relative_to(STORE) and not path.is_relative_to(EMULATORS):
                yield path


def test_no_module_outside_the_store_writes_a_row_when_sources_are_parsed() -> None:
    offenders = [
        f"{path.relative_to(ROOT)}:{write}"
        for path in _sources_outside_the_store()
        for write in row_writes(path.read_text(encoding="utf-8"))
    ]

    assert offenders == []


def test_emulators_never_import_the_store_when_sources_are_parsed() -> None:
    importing = [
        path.relative_to(ROOT)
        for path in sorted(EMULATORS.rglob("*.py"))
        if "runtime.store" in path.read_text(encoding="utf-8")
    ]

    assert importing == []


def test_each_kind_of_row_write_is_found_when_source_has_one() -> None:
    source = """
task.result = {"status": "failed"}
execution.version += 1
row.state: str = "stale"
del row.landed_at
a, row.body = 1, "new"
setattr(row, "lease_id", None)
session.add(TaskRow(task_id="t"))
self.state = "mine"
setattr(self, "body", "mine")
record = replace(task, result=None)
"""

    found = row_writes(source)

    assert [line.split(":")[0] for line in found] == ["2", "3", "4", "5", "6", "7", "8"]


def _conflict_clauses(source: str) -> list[str]:
    """Each insert-ignore spelt in ``source``: a dialect's insert construct imported, or its
    conflict clause called."""
    found: list[str] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
            "sqlalchemy.dialects"
        ):
            found.extend(f"{node.lineno}: {alias.name}" for alias in node.names)
        elif isinstance(node, ast.Attribute) and node.attr.startswith("on_conflict_do"):
            found.append(f"{node.lineno}: {node.attr}")
    return found


def test_only_the_insert_helper_spells_insert_ignore_when_sources_are_parsed() -> None:
    helper = STORE / "inserts.py"
    packages = ("runtime", "routing", "adapters")
    sources = (path for package in packages for path in (ROOT / package).rglob("*.py"))
    spelt = [
        f"{path.relative_to(ROOT)}:{clause}"
        for path in sorted(sources)
        if path != helper
        for clause in _conflict_clauses(path.read_text(encoding="utf-8"))
    ]

    assert spelt == []
    assert _conflict_clauses(helper.read_text(encoding="utf-8")) != []  # the check sees it
