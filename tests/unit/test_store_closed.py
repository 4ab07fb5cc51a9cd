"""The store is closed: no public function of ``runtime/store`` hands an ORM row to its caller.

Imported, not parsed: each public function (and public method of a public class) defined in a
store module has its return annotation resolved, and every class it names, inside containers
and unions too, must not be one the ORM registry maps. The ORM schema itself and the engine
and migration plumbing are left out: they are how the store reaches the database, not what it
answers.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import typing
from collections.abc import Callable, Iterator
from types import ModuleType

import runtime.store
from runtime.store.models import Base

ROWS = frozenset(mapper.class_ for mapper in Base.registry.mappers)
PLUMBING = frozenset({"runtime.store.models", "runtime.store.engine", "runtime.store.migrate"})


def _store_modules() -> Iterator[ModuleType]:
    for info in pkgutil.iter_modules(runtime.store.__path__, "runtime.store."):
        if info.name not in PLUMBING and not info.name.endswith(".migrations"):
            yield importlib.import_module(info.name)


def _public_callables(module: ModuleType) -> Iterator[tuple[str, Callable[..., object]]]:
    for name, value in vars(module).items():
        if name.startswith("_") or getattr(value, "__module__", None) != module.__name__:
            continue
        if inspect.isfunction(value):
            yield name, value
        elif inspect.isclass(value):
            for method_name, method in vars(value).items():
                if inspect.isfunction(method) and not method_name.startswith("_"):
                    yield f"{name}.{method_name}", method


def _named_classes(annotation: object) -> Iterator[object]:
    yield annotation
    for argument in typing.get_args(annotation):
        yield from _named_classes(argument)


def _rows_returned(function: Callable[..., object]) -> list[str]:
    returned = typing.get_type_hints(function).get("return")
    return [getattr(c, "__name__", "") for c in _named_classes(returned) if c in ROWS]


def open_functions(modules: list[ModuleType]) -> list[str]:
    """Each public store function whose return annotation names an ORM row, as
    ``module.function: Row``."""
    return [
        f"{module.__name__}.{name}: {row}"
        for module in modules
        for name, function in _public_callables(module)
        for row in _rows_returned(function)
    ]


def test_no_store_function_returns_a_row_when_annotations_are_resolved() -> None:
    assert open_functions(list(_store_modules())) == []


def test_a_row_inside_a_container_is_found_when_a_function_returns_one() -> None:
    module = ModuleType("runtime.store.example")
    source = (
        "from collections.abc import Sequence\n"
        "from runtime.store.models import TaskRow\n"
        "def rows() -> Sequence[TaskRow | None]: ...\n"
        "def ids() -> list[str]: ...\n"
    )
    exec(compile(source, "<example>", "exec"), vars(module))

    assert open_functions([module]) == ["runtime.store.example.rows: TaskRow"]
