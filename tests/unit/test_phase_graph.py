"""The phase table: one table for the runner, the same edges in the phases' types for mypy."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import get_args, get_type_hints

import pytest

from runtime.execution import ON_ERROR, PHASES, Phase, phase_named
from runtime.executor.phase_table import TABLE, may_follow

ROOT = Path(__file__).resolve().parents[2]


def _declared_successors(phase: Phase) -> frozenset[str]:
    returned = get_type_hints(TABLE[phase].run)["return"]
    (targets,) = get_args(returned)
    return frozenset(get_args(targets))


def test_every_phase_has_a_function_and_successors_when_graph_is_loaded() -> None:
    assert set(TABLE) == set(PHASES)
    assert all(TABLE[phase].next <= PHASES for phase in PHASES)


@pytest.mark.parametrize("phase", sorted(PHASES))
def test_phase_return_type_names_its_successors_when_read_back(phase: Phase) -> None:
    assert _declared_successors(phase) == TABLE[phase].next


def test_runner_refuses_an_edge_the_graph_lacks_when_asked() -> None:
    assert may_follow("load_context", "check_scheduler")
    assert may_follow("await_tools", ON_ERROR)  # any phase may fail
    assert not may_follow("load_context", "done")
    assert not may_follow("done", ON_ERROR)
    assert phase_named("load_context") == "load_context"
    assert phase_named("load_contxt") is None


def _mypy(tmp_path: Path, body: str) -> subprocess.CompletedProcess[str]:
    snippet = tmp_path / "snippet.py"
    header = """
        from typing import Literal
        from runtime.executor.context import ExecutorContext, Transition, goto
        from runtime.store.records import Task
        from runtime.store.executions import Run
    """
    snippet.write_text(textwrap.dedent(header) + textwrap.dedent(body))
    command = [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", str(snippet)]
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


SPELT_RIGHT = """
    async def check(run: Run, task: Task, ctx: ExecutorContext) -> Transition[
        Literal["call_model", "report_stopped"]
    ]:
        if run.stop_requested:
            return goto(run, "report_stopped")
        return goto(run, "call_model")
"""


def test_mypy_accepts_declared_transitions_when_phases_are_spelt_right(tmp_path: Path) -> None:
    checked = _mypy(tmp_path, SPELT_RIGHT)

    assert checked.returncode == 0, checked.stdout


@pytest.mark.parametrize(
    ("body", "complaint"),
    [
        (SPELT_RIGHT.replace('"call_model")', '"cal_model")'), "\"Literal['cal_model']\""),
        (SPELT_RIGHT.replace('"report_stopped")', '"done")'), "\"Literal['done']\""),
    ],
    ids=["misspelt phase", "phase that is no declared successor"],
)
def test_mypy_refuses_a_transition_when_phase_is_misspelt_or_undeclared(
    tmp_path: Path, body: str, complaint: str
) -> None:
    checked = _mypy(tmp_path, body)

    assert checked.returncode == 1, checked.stdout
    assert complaint in checked.stdout
