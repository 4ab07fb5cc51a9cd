"""What cached environments save (#39): two ratios measured in one run.

- ``setup_warm_vs_cold_first_call_s``: from scheduling a task to its first model call, on a
  repository whose setup creates a virtualenv and installs 21 real packages from PyPI through
  Keel's egress proxy (the setup's default allowlist), with the environment cached (a second
  task of the same repository: the cache is restored, setup is not run) against without (the
  first task: clone, setup, store). Keel as an operator runs it (``Keel`` from a config tree,
  bubblewrap, SQLite, the scripted model); the model provider is wrapped to note the moment of
  its first call. Target ≤ 0.15. Needs PyPI: without it the benchmark fails, it does not guess.
- ``setup_restore_vs_cp_a``: restoring a 200 MB environment (2,000 files in 100 folders) from
  the cache into a fresh workspace against ``cp -a`` of the same tree, median of 5, the two
  alternating. The restore uses hard links when the cache and the workspace share a
  filesystem (printed), else a copy. Target ≤ 0.5.

No timing is asserted anywhere; this prints RESULT lines for ``bench/run.py``.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from adapters.assembly import Keel  # noqa: E402
from adapters.config import build_config  # noqa: E402
from adapters.emulators.github_git import init_bare_repository  # noqa: E402
from bench.common import Figure  # noqa: E402
from runtime.executor.runner import Runner  # noqa: E402
from runtime.models.base import ModelProvider, ModelRequest, ModelResponse  # noqa: E402
from runtime.store import ledger  # noqa: E402
from runtime.store.records import TaskSpec  # noqa: E402
from runtime.workspace.envcache import EnvCache  # noqa: E402

PACKAGES = (
    "requests urllib3 idna certifi charset-normalizer six python-dateutil pytz attrs packaging "
    "pyparsing click itsdangerous markupsafe jinja2 werkzeug flask blinker tomli colorama "
    "tabulate"
)
SETUP = (
    f"set -e; {sys.executable} -m venv .venv; "
    f".venv/bin/pip install -q --disable-pip-version-check {PACKAGES}"
)
RESTORE_RUNS = 5


class FirstCall:
    """The provider Keel built, noting when each task's first model call came."""

    def __init__(self, inner: ModelProvider) -> None:
        self.inner = inner
        self.first: dict[str, float] = {}

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.first.setdefault(request.task_id, time.monotonic())
        return await self.inner.complete(request)


def sh(*argv: str, cwd: Path | None = None) -> None:
    subprocess.run(argv, cwd=cwd, check=True, capture_output=True)


def origin(folder: Path) -> Path:
    files = {".gitignore": ".venv/\n", "requirements.txt": "\n".join(PACKAGES.split()) + "\n"}
    return init_bare_repository(folder, "origin", files, "main", "i")


async def first_call_seconds(folder: Path) -> tuple[float, float, str]:
    """(warm, cold) seconds from scheduling to the first model call, and the warm setup row."""
    (folder / "script.yaml").write_text(yaml.safe_dump({"scripts": [{"turns": [{"say": "ok"}]}]}))
    tree: dict[str, Any] = {
        "database": {"url": f"sqlite:///{folder}/keel.db"},
        "model": {"provider": "scripted", "script": str(folder / "script.yaml")},
        "workspace": {
            "root": str(folder / "ws"),
            "sandbox": "bwrap",
            "repositories": {"bench": {"url": str(origin(folder)), "setup": SETUP}},
        },
        "worker": {"concurrency": 1, "poll_interval_s": 0.02},
    }
    keel = Keel(build_config(tree, env={}))
    await asyncio.to_thread(keel.migrate)
    await keel.connect()
    runner = keel.worker.runner
    assert isinstance(runner, Runner)
    timer = FirstCall(runner.ctx.provider)
    runner.ctx.provider = timer
    await keel.start()
    try:
        seconds = []
        for n in range(2):
            started = time.monotonic()
            spec = TaskSpec(agent="default", message="go", repo="bench", objective_key=f"b{n}")
            task = (await keel.scheduler.transact(keel.scheduler.schedule, spec)).task
            for _ in range(30_000):
                if task.task_id in timer.first:
                    break
                await asyncio.sleep(0.02)
            else:
                raise SystemExit("no model call within 10 minutes: is PyPI reachable?")
            seconds.append(timer.first[task.task_id] - started)
            while not ((await keel.scheduler.get(task.task_id)) or task).status.is_terminal:
                await asyncio.sleep(0.05)
            evidence = await keel.db.read(
                lambda s, root=task.root_id: ledger.evidence_of_tree(s, root)
            )
            [setup] = [e.item.detail for e in evidence if e.item.kind == "setup"]
            if n == 0 and (setup.get("status"), setup.get("exit_code")) != ("ran", 0):
                raise SystemExit(f"the cold setup did not succeed: {setup}")
            if n == 1 and setup.get("status") != "restored":
                raise SystemExit(f"the warm task did not restore the cache: {setup}")
        return seconds[1], seconds[0], str(setup.get("cache"))
    finally:
        await keel.stop()


def environment(folder: Path) -> None:
    """200 MB in 2,000 files of 100 KB, in 100 folders."""
    block = os.urandom(100 * 1024)
    for d in range(100):
        sub = folder / ".venv" / f"pkg{d}"
        sub.mkdir(parents=True)
        for f in range(20):
            (sub / f"m{f}.py").write_bytes(block[f:] + block[:f])


async def restore_vs_copy(folder: Path) -> tuple[list[float], list[float], str]:
    source_ws, home = folder / "src", folder / "home"
    source_ws.mkdir()
    home.mkdir()
    environment(source_ws)
    cache = EnvCache(folder / "cache")
    stored = await cache.store("bench", "bench", source_ws, home, [".venv"])
    assert not isinstance(stored, str), stored
    restores, copies, method = [], [], ""
    for n in range(RESTORE_RUNS):
        order = ("restore", "copy") if n % 2 == 0 else ("copy", "restore")
        for what in order:
            target = folder / f"{what}-{n}"
            target.mkdir()
            subprocess.run(["sync"], check=True)
            started = time.perf_counter()
            if what == "restore":
                (folder / f"home-{n}").mkdir()
                restored = await cache.restore(
                    "bench", target, folder / f"home-{n}", folder / f"stage-{n}"
                )
                assert restored is not None
                method = restored.method
                restores.append(time.perf_counter() - started)
            else:
                sh("cp", "-a", str(source_ws / ".venv"), str(target / ".venv"))
                copies.append(time.perf_counter() - started)
    return restores, copies, method


async def main() -> int:
    with tempfile.TemporaryDirectory(prefix="keel-bench-cache-") as tmp:
        restores, copies, method = await restore_vs_copy(Path(tmp))
        ratios = tuple(r / c for r, c in zip(restores, copies, strict=True))
        print(f"restore method: {method} (filesystem of {tmp})")
        figure = Figure(
            "setup_restore_vs_cp_a_s", statistics.median(restores), statistics.median(copies),
            0.5, higher_is_better=False, ratios=ratios,
        )
        print(figure.result_line())
    with tempfile.TemporaryDirectory(prefix="keel-bench-setup-") as tmp:
        warm, cold, how = await first_call_seconds(Path(tmp))
        print(f"warm restore: {how}; cold includes the clone, setup (21 packages) and the store")
        print(Figure("setup_warm_vs_cold_first_call_s", warm, cold, 0.15,
                     higher_is_better=False).result_line())
    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
