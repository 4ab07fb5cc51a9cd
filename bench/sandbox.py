"""What the hardened devbox costs (#37): three ratios against the same work done bare.

- ``sandbox_launch_ms``: ``python3 -S -c pass`` wrapped by ``Sandbox(mode="bwrap").wrap``
  (bubblewrap: a user namespace with every capability dropped, PID, IPC and network
  namespaces, the filesystem Keel assembles) against the bare command;
  process wall time, the argv built once beforehand. Target ≤ 2.
- ``sandbox_run_command_ms``: a whole ``run_command`` (the devbox tool: start, then poll until
  it reports) of a small repository's pytest suite against the same command as a bare
  subprocess in the same folder. Polled every 10 ms, so the figure is the tool's cost and not
  the poll interval's (the executor's own interval is a scheduling choice). Target ≤ 1.5.
- ``sandbox_git_commit_push_ms``: Keel's ``git_commit`` + ``git_push`` of a one-line change to
  a feature branch, on a workspace made by ``Workspaces(root, "bwrap")`` (the commit runs
  inside the sandbox; the push moves the commit into Keel's mirror and pushes from there, then
  reads the branch back) against ``git commit -qam`` + ``git push`` of the same change in a
  plain clone of the same origin. Target ≤ 2.

Each is the median of several runs, the bare and the sandboxed measured in the same run,
alternating which goes first; no timing is asserted anywhere.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.emulators.github_git import init_bare_repository  # noqa: E402
from bench.common import Figure  # noqa: E402
from runtime.tools.base import Completed, ToolContext  # noqa: E402
from runtime.tools.devbox import GitCommit, GitPush, RunCommand  # noqa: E402
from runtime.workspace import Workspaces, WorkspaceSpec  # noqa: E402
from runtime.workspace.sandbox import Sandbox, bwrap_works  # noqa: E402

LAUNCH_RUNS, LAUNCHES_PER_RUN = 7, 15
TEST_RUNS = 7
GIT_RUNS = 7
POLL_S = 0.01
PYTEST = "python3 -m pytest -q -p no:cacheprovider"
IDENTITY = ("-c", "user.name=Bench", "-c", "user.email=bench@localhost")

SAMPLE = {
    "shop/__init__.py": "",
    "shop/cart.py": textwrap.dedent('''\
        """A cart: items with prices and quantities."""


        def total(items: list[tuple[str, int, int]]) -> int:
            return sum(price * quantity for _, price, quantity in items)


        def discount(amount: int, percent: int) -> int:
            return amount - amount * percent // 100
        '''),
    "tests/test_cart.py": textwrap.dedent('''\
        import pytest

        from shop.cart import discount, total


        def test_empty_cart_costs_nothing():
            assert total([]) == 0


        def test_total_multiplies_quantities():
            assert total([("pen", 150, 2), ("pad", 300, 1)]) == 600


        @pytest.mark.parametrize(("amount", "percent", "left"), [(100, 10, 90), (99, 0, 99)])
        def test_discount(amount, percent, left):
            assert discount(amount, percent) == left


        def test_full_discount_is_free():
            assert discount(500, 100) == 0
        '''),
    "README.md": "# shop\n",
}


def sh(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)


def wall_s(argv: Sequence[str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    subprocess.run(argv, cwd=cwd, check=False, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def make_origin(folder: Path) -> Path:
    """A bare ``origin.git`` whose main holds the sample package and its tests."""
    return init_bare_repository(folder, "origin", SAMPLE, "main", "Add the cart")


def interleaved(runs: int, bare: Callable[[], float], keel: Callable[[], float]
                ) -> list[tuple[float, float]]:
    """(keel, bare) per run, in ms; which goes first alternates between runs."""
    pairs = []
    for i in range(runs):
        if i % 2:
            k, b = keel(), bare()
        else:
            b, k = bare(), keel()
        pairs.append((k * 1000, b * 1000))
    return pairs


async def interleaved_with_tool(
    runs: int, bare: Callable[[], float], keel: Callable[[], Awaitable[float]]
) -> list[tuple[float, float]]:
    """As ``interleaved``, for a Keel side that is a tool call (awaited)."""
    pairs = []
    for i in range(runs):
        if i % 2:
            k = await keel()
            b = bare()
        else:
            b = bare()
            k = await keel()
        pairs.append((k * 1000, b * 1000))
    return pairs


def figure(name: str, pairs: list[tuple[float, float]], target: float) -> Figure:
    values, baselines = [k for k, _ in pairs], [b for _, b in pairs]
    return Figure(name, statistics.median(values), statistics.median(baselines), target,
                  higher_is_better=False, ratios=tuple(k / b for k, b in pairs if b))


def launch_figure(root: Path) -> Figure:
    ws = root / "workspaces" / "launch"
    ws.mkdir(parents=True)
    argv = ["python3", "-S", "-c", "pass"]
    wrapped = Sandbox(mode="bwrap").wrap(argv, ws, "bwrap")
    if subprocess.run(wrapped, capture_output=True).returncode != 0:
        raise RuntimeError("the sandboxed python3 -S -c pass failed")

    def many(command: Sequence[str]) -> Callable[[], float]:
        return lambda: statistics.median(wall_s(command) for _ in range(LAUNCHES_PER_RUN))

    many(argv)(), many(wrapped)()  # warm the page cache for both
    return figure("sandbox_launch_ms", interleaved(LAUNCH_RUNS, many(argv), many(wrapped)), 2.0)


async def run_to_end(tool: RunCommand, ws: Path, command: str, call_id: str) -> Completed:
    ctx = ToolContext("task-1", ws.name, call_id, workspace=ws)
    started = await tool.start({"command": command, "timeout_s": 120}, ctx)
    if isinstance(started, Completed):
        return started
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        result = await tool.poll(started.handle, ctx)
        if isinstance(result, Completed):
            return result
        await asyncio.sleep(POLL_S)
    raise RuntimeError("run_command did not finish in 120 s")


async def run_command_figure(root: Path, origin: Path) -> Figure:
    ws = root / "workspaces" / "tests"
    sh("git", "clone", "-q", str(origin), str(ws))
    tool = RunCommand(Sandbox(mode="bwrap"))
    counter = iter(range(10**6))

    async def keel() -> float:
        started = time.perf_counter()
        result = await run_to_end(tool, ws, PYTEST, f"call-{next(counter)}")
        elapsed = time.perf_counter() - started
        if "exit code 0 " not in result.output:
            raise RuntimeError(f"the sandboxed test run failed:\n{result.output[-1500:]}")
        return elapsed

    def bare() -> float:
        return wall_s(["bash", "-c", PYTEST], cwd=ws)

    bare()
    await keel()  # both see the same __pycache__ from here on
    pairs = await interleaved_with_tool(TEST_RUNS, bare, keel)
    return figure("sandbox_run_command_ms", pairs, 1.5)


async def git_figure(root: Path, origin: Path) -> Figure:
    ws = await Workspaces(root / "workspaces", "bwrap").ensure(WorkspaceSpec("root-1", str(origin)))
    plain = root / "plain"
    sh("git", "clone", "-q", str(origin), str(plain))
    counter = iter(range(10**6))

    async def keel() -> float:
        i = next(counter)
        with (ws / "README.md").open("a") as f:
            f.write(f"change {i}\n")
        ctx = ToolContext("task-1", "root-1", f"call-git-{i}", workspace=ws)
        started = time.perf_counter()
        commit = await GitCommit().start({"message": f"Change {i}"}, ctx)
        pushed = await GitPush().start({"branch": f"keel/bench-{i}"}, ctx)
        elapsed = time.perf_counter() - started
        for step, result in (("git_commit", commit), ("git_push", pushed)):
            if not isinstance(result, Completed) or result.is_error:
                raise RuntimeError(f"{step} failed: {getattr(result, 'output', result)}")
        return elapsed

    plain_counter = iter(range(10**6))

    def bare() -> float:
        i = next(plain_counter)
        with (plain / "README.md").open("a") as f:
            f.write(f"change {i}\n")
        started = time.perf_counter()
        sh("git", *IDENTITY, "commit", "-qam", f"Change {i}", cwd=plain)
        sh("git", "push", "-q", "origin", f"HEAD:refs/heads/plain/bench-{i}", cwd=plain)
        return time.perf_counter() - started

    pairs = await interleaved_with_tool(GIT_RUNS + 1, bare, keel)
    return figure("sandbox_git_commit_push_ms", pairs[1:], 2.0)  # the first pair warms up


async def main() -> int:
    # ``python3`` is the interpreter Keel runs on (with pytest), for the bare and the sandboxed.
    os.environ["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"
    if not await bwrap_works():
        print("bubblewrap does not start here: nothing to measure", file=sys.stderr)
        return 1
    print(f"python3: {shutil.which('python3')} -> {Path(sys.executable).resolve()}")
    root = Path(tempfile.mkdtemp(prefix="keel-bench-sandbox-"))
    failed = False
    try:
        origin = make_origin(root)
        figures = [launch_figure(root), await run_command_figure(root, origin)]
        try:
            figures.append(await git_figure(root, origin))
        except Exception as e:  # the git tools may be mid-change: say so, keep the others
            print(f"git_commit + git_push could not be measured: {type(e).__name__}: {e}",
                  file=sys.stderr)
            failed = True
        for found in figures:
            spread = f"{min(found.ratios):.2f}-{max(found.ratios):.2f}"
            print(f"{found.name}: {found.value:.1f} ms vs bare {found.baseline:.1f} ms, "
                  f"ratio {found.ratio:.2f} (runs {spread}), target <= {found.target}")
        for found in figures:
            print(found.result_line())
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
