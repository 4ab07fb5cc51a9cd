"""``keel run``: one task, end to end, from the terminal.

The same Keel as ``keel serve`` (the configured model, a workspace, the sandbox, the real
tools), with Slack and GitHub off and the terminal as the task's thread: its progress, its
reply with evidence, and each phase and tool outcome are printed as they happen. The
repository is a local folder (its committed state, cloned into the workspace as configured
repositories are) or a URL git can clone. Ctrl-C asks the task to stop and waits for it to
say it stopped. Tasks are kept in a database of the run's own (a temporary SQLite unless
``--database-url`` names one), so a server's workers never see the terminal's thread.

Exit codes: 0 the task succeeded, 1 it ended otherwise, 2 a bad request (no such
repository, an unknown agent), 3 stopped with Ctrl-C.
"""

from __future__ import annotations

import asyncio
import getpass
import hashlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from adapters.assembly import Keel
from adapters.config import AppConfig, GitHubConfig, SlackConfig
from adapters.terminal import TerminalSurface, terminal_thread
from runtime.config import RepositoryConfig
from runtime.store import executions, outbox, tool_calls
from runtime.store.records import Task, TaskSpec, TaskStatus
from runtime.workspace.git import git_command

Echo = Callable[[str], None]

SUCCEEDED, FAILED, USAGE, STOPPED = 0, 1, 2, 3
_POLL_S = 0.2


class RunRefused(Exception):
    """What was asked cannot run: the message says why."""


@dataclass(frozen=True, slots=True)
class Repository:
    key: str
    config: RepositoryConfig
    note: str | None = None  # said before the run starts (uncommitted changes stay out)


def repository(source: str) -> Repository:
    """The repository ``source`` names: a local git folder or a URL git can clone."""
    path = Path(source).expanduser()
    if path.exists():
        return _local(path.resolve())
    if "://" in source or source.startswith("git@"):
        last = source.rstrip("/").rsplit("/", 1)[-1].rsplit(":", 1)[-1]
        ref = _remote_head(source)
        return Repository(_name(last, source), RepositoryConfig(url=source, ref=ref))
    raise RunRefused(f"--repo {source!r}: no such folder, and not a URL git can clone")


def _local(path: Path) -> Repository:
    if _git(path, "rev-parse", "--git-dir") is None:
        raise RunRefused(f"--repo {path}: not a git repository")
    ref = _git(path, "symbolic-ref", "--short", "HEAD")
    if ref is None:
        raise RunRefused(f"--repo {path}: HEAD is not on a branch; check one out first")
    # Said whether or not there are any: finding out would mean ``git status`` in a folder
    # whose config may name an fsmonitor or a filter to run (it may be a task's checkout).
    note = f"note: the task starts from {ref}'s last commit; uncommitted changes stay out"
    url = path.as_uri()
    return Repository(_name(path.name, url), RepositoryConfig(url=url, ref=ref), note)


def _name(last: str, where: str) -> str:
    """``local/<last part>-<digest of where>``: two folders or URLs that end alike never share
    a name, so never an environment cache entry (they are keyed by repository)."""
    stem = re.sub(r"[^\w.-]", "-", last.removesuffix(".git")) or "repository"
    return f"local/{stem}-{hashlib.sha256(where.encode()).hexdigest()[:10]}"


def _remote_head(url: str) -> str:
    """The branch a remote's HEAD names; ``main`` when it cannot say."""
    out = _git(None, "ls-remote", "--symref", url, "HEAD") or ""
    for line in out.splitlines():
        if line.startswith("ref: refs/heads/"):
            return line.split()[1].removeprefix("refs/heads/")
    return "main"


def _git(path: Path | None, *args: str) -> str | None:
    """Keel's hardened git (no hooks, no fsmonitor, no system or global config): the folder
    may be anyone's, a task's checkout included, whose ``.git`` a sandboxed command wrote."""
    where = ["-C", str(path)] if path is not None else []
    command = git_command([*where, *args])
    try:
        done = subprocess.run(
            command.argv, env=dict(command.env), capture_output=True, text=True, timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() if done.returncode == 0 else None


def run_config(config: AppConfig, repo: Repository) -> AppConfig:
    """The configuration with Slack and GitHub off, no fallback thread, and the repository."""
    repositories = {**config.workspace.repositories, repo.key: repo.config}
    return config.model_copy(
        update={
            "slack": SlackConfig(),
            "github": GitHubConfig(),
            "workspace": config.workspace.model_copy(update={"repositories": repositories}),
            "reporting": config.reporting.model_copy(update={"fallback": None}),
        }
    )


def run_command(
    config: AppConfig,
    text: str,
    source: str,
    agent: str | None,
    database_url: str | None,
    echo: Echo,
) -> int:
    """What ``keel run`` does; the answer is its exit code. Refusals go to stderr."""
    try:
        repo = repository(source)
    except RunRefused as e:
        _complain(f"error: {e}")
        return USAGE
    chosen = agent or "default"
    if chosen not in config.agents:
        _complain(f"error: unknown agent {chosen!r} (agents: {', '.join(config.agents)})")
        return USAGE
    if repo.note:
        _complain(repo.note)
    with tempfile.TemporaryDirectory(prefix="keel-run-") as folder:
        # Keel reads KEEL_DATABASE_URL over database.url: the run's own database wins.
        os.environ["KEEL_DATABASE_URL"] = database_url or f"sqlite:///{folder}/keel.db"
        return asyncio.run(_run(run_config(config, repo), text, repo, chosen, echo))


async def _run(config: AppConfig, text: str, repo: Repository, agent: str, echo: Echo) -> int:
    interrupted = asyncio.Event()
    loop = asyncio.get_running_loop()

    def on_interrupt() -> None:
        interrupted.set()
        loop.remove_signal_handler(signal.SIGINT)  # a second Ctrl-C ends the process at once

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    keel = Keel(config)
    keel.surfaces["local"] = TerminalSurface(echo)
    await asyncio.to_thread(keel.migrate)
    await keel.connect()
    await keel.start(workers=True)
    try:
        thread = terminal_thread(time.time())
        spec = TaskSpec(
            agent=agent,
            message=text,
            origin_thread_ref=thread,
            objective_key=str(thread),
            repo=repo.key,
            requested_by=_user(),
        )
        task = (await keel.scheduler.transact(keel.scheduler.schedule, spec)).task
        echo(f"task {task.task_id} ({agent}) on {repo.config.url}@{repo.config.ref}")
        echo(f"you: {text}")
        final = await _follow(keel, task.task_id, interrupted, echo)
    finally:
        await keel.stop()
    checkout = config.workspace.root.absolute() / final.task_id
    if checkout.is_dir():
        echo(f"the task's checkout (what it changed and committed): {checkout}")
    return _ending(final, interrupted.is_set(), echo)


async def _follow(keel: Keel, task_id: str, interrupted: asyncio.Event, echo: Echo) -> Task:
    """Print each phase and tool outcome until the task has ended and its replies are out."""
    db = keel.db
    phase: str | None = None
    seen: set[str] = set()
    asked_to_stop = False
    while True:
        if interrupted.is_set() and not asked_to_stop:
            asked_to_stop = True
            echo("stopping the task (Ctrl-C)…")
            await keel.scheduler.transact(
                keel.scheduler.request_cancel, task_id, "stopped with Ctrl-C", _user()
            )
        run = await db.read(lambda s: executions.load_run(s, task_id))
        if run is not None and run.phase != phase:
            phase = run.phase
            echo(f"  · phase {run.phase} (turn {run.turn})")
        for call in await db.read(lambda s: tool_calls.all_calls(s, task_id)):
            if call.outcome and call.call_id not in seen:
                seen.add(call.call_id)
                echo(f"  · tool {call.name}: {call.outcome}")
        task = await keel.scheduler.get(task_id)
        assert task is not None
        if task.status.is_terminal and phase == "done" and not await _sending(keel, task_id):
            return task
        await asyncio.sleep(_POLL_S)


async def _sending(keel: Keel, task_id: str) -> bool:
    posts = await keel.db.read(lambda s: outbox.posts_of_task(s, task_id))
    return any(p.state in ("pending", "sending", "stale") for p in posts)


def _ending(task: Task, interrupted: bool, echo: Echo) -> int:
    summary = str((task.result or {}).get("summary") or "")
    if interrupted and task.status is TaskStatus.canceled:
        echo(f"stopped: task {task.task_id} was canceled with Ctrl-C")
        return STOPPED
    if task.status is TaskStatus.succeeded:
        echo(f"task {task.task_id} succeeded")
        return SUCCEEDED
    echo(f"task {task.task_id} {task.status.value}: {summary}")
    return FAILED


def _complain(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return "terminal"
