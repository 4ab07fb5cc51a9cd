"""A repository's setup step: run once per workspace, before the task's first model call.

The command is the operator's (``workspace.repositories.<repo>.setup``) or, when none is
configured, the repository's own ``.keel/setup.sh`` if its cloned commit has one (seen in
Keel's mirror, never read from the workspace). It runs as a detached command in the same
sandbox as the agent's commands, with its own time limit, the repository's egress (by default
the public package registries through Keel's proxy) and, for the operator's command, every
one of the repository's secrets (the repository's own script gets none: it is repository code,
which a pull request can change; an operator who trusts it names it as the command).

Before it runs, a cached environment for the same (repository, setup, lockfiles) is restored
instead (``runtime.workspace.envcache``), then the optional ``maintenance`` command runs.
After a setup that exits 0, what it produced is stored for the next workspace.

Its progress is recorded in the workspace's state folder (``setup.json``): the attempt, the
execution it started, and at the end the report. A worker that dies while setup runs leaves
the execution running: the next one adopts it and waits. An execution that was itself lost
(its processes killed with the worker, a reboot) is run again once, under a new execution,
and never a third time: the report then says setup was interrupted. A failed setup does not
stop the task; its report says what failed, and the agent may fix it.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Literal

from runtime.workspace.commands import (
    CommandRun,
    Finished,
    Running,
    check,
    execution_id,
    launch,
    mask,
    mask_logs,
    read_bounded,
    refused_hosts,
)
from runtime.workspace.egress import Egress
from runtime.workspace.envcache import LOCKFILES, EnvCache, cache_key
from runtime.workspace.git import git, workspace_git
from runtime.workspace.sandbox import Sandbox
from runtime.workspace.state import WorkspaceState

log = logging.getLogger(__name__)

REPOSITORY_SCRIPT = ".keel/setup.sh"
MAX_ATTEMPTS = 2
TAIL_CHARS = 2000
Status = Literal["none", "ran", "restored", "interrupted", "unavailable"]
Started = Callable[[str], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class SetupDefinition:
    """How one repository is set up (from ``workspace.repositories``, or the defaults)."""

    repo: str
    command: str | None = None  # the operator's; None: the repository's script; "": none
    timeout_s: int = 1800
    maintenance: str | None = None
    egress: Egress = field(default_factory=lambda: Egress("allowlist"))
    secrets: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SetupReport:
    status: Status
    command: str | None = None
    source: Literal["operator", "repository"] | None = None
    exit_code: int | None = None
    outcome: str = ""
    duration_s: float = 0.0
    tail: str = ""
    attempts: int = 0
    cache: str = ""
    refused: tuple[str, ...] = ()
    maintenance_exit: int | None = None

    @property
    def failed(self) -> bool:
        return self.status in ("interrupted", "unavailable") or (
            self.status == "ran" and self.exit_code != 0
        )

    def summary(self) -> str:
        """One line for the brief, the progress signal and the reply."""
        match self.status:
            case "none":
                return "no setup step (none configured, no .keel/setup.sh)"
            case "restored":
                extra = (
                    f"; maintenance exit {self.maintenance_exit}"
                    if self.maintenance_exit is not None
                    else ""
                )
                return f"cached environment restored ({self.cache}), setup not run{extra}"
            case "unavailable":
                return f"the workspace could not be prepared: {self.outcome}"
            case "interrupted":
                return f"`{self.command}` was interrupted {self.attempts} times and not run again"
            case "ran":
                verdict = (
                    f"exit {self.exit_code}"
                    if self.outcome == "exited"
                    else self.outcome.replace("_", " ")
                )
                line = f"`{self.command}` {verdict} after {self.duration_s:.1f}s"
                if self.cache.startswith("not cached"):
                    line += f"; {self.cache}"
                return line

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def report_from(data: Mapping[str, Any]) -> SetupReport:
    fields = {k: v for k, v in data.items() if k in SetupReport.__dataclass_fields__}
    fields["refused"] = tuple(fields.get("refused", ()))
    return SetupReport(**fields)


def _setup_execution(workspace: Path, name: str) -> str:
    """The setup's own execution ids: stable, and apart from every tool call's."""
    return execution_id(workspace.name, f"setup:{name}")


class Setups:
    """Runs each workspace's setup once (per process: a lock; across processes: the record
    and the execution ids, which are the same for the same attempt)."""

    def __init__(
        self, sandbox: Sandbox, cache: EnvCache | None, *, poll_s: float = 0.25
    ) -> None:
        self.sandbox = sandbox
        self.cache = cache
        self.poll_s = poll_s
        self._locks: dict[Path, asyncio.Lock] = {}

    async def prepare(
        self, workspace: Path, definition: SetupDefinition, started: Started | None = None
    ) -> SetupReport:
        """The workspace's setup report, running (or restoring) it the first time; ``started``
        hears what begins (for the thread's progress)."""
        async with self._locks.setdefault(workspace, asyncio.Lock()):
            state = WorkspaceState(workspace).ensure()
            record = _read(state)
            if "report" in record:
                return report_from(record["report"])
            if not record.get("fresh"):  # made before setup steps existed: used already
                return SetupReport("none")
            report = await self._prepare(workspace, state, definition, record, started)
            _write(state, record | {"report": report.as_dict()})
            return report

    async def _prepare(
        self,
        workspace: Path,
        state: WorkspaceState,
        definition: SetupDefinition,
        record: dict[str, Any],
        started: Started | None,
    ) -> SetupReport:
        blobs = await _blobs(state)
        command, source = _command(definition, blobs)
        if command is None:
            return SetupReport("none")
        shown = mask(command, definition.secrets.values())  # what reports and progress may say
        if started is not None:
            await started(f"setting up the repository: {shown}")
        key = cache_key(definition.repo, command, definition.maintenance, blobs)
        # The repository's own script is the repository's code (a pull request's branch may
        # have written it): it gets the network, not the operator's secrets, unless the
        # operator names it as the setup command.
        secrets = definition.secrets if source == "operator" else {}
        sandbox = replace(self.sandbox, egress=definition.egress, secrets=secrets)
        if self.cache is not None and "attempt" not in record:
            staging = state.root / "restoring"
            restored = await self.cache.restore(key, workspace, state.home, staging)
            if restored is not None:
                maintenance = None
                if definition.maintenance:
                    finished, _ = await self._run(
                        workspace, "maintenance", definition.maintenance, definition, sandbox
                    )
                    maintenance = finished.exit_code
                return SetupReport(
                    "restored", shown, source, cache=restored.method, maintenance_exit=maintenance
                )
        attempt = int(record.get("attempt", 0))
        if attempt < 1:  # a first run; else the recorded attempt is adopted, or run again
            attempt = record["attempt"] = 1
            _write(state, record)
        while True:
            finished, refused = await self._run(
                workspace, f"attempt-{attempt}", command, definition, sandbox
            )
            if finished.outcome != "lost" or attempt >= MAX_ATTEMPTS:
                break
            log.warning("setup of %s was interrupted (attempt %d)", workspace.name, attempt)
            attempt = record["attempt"] = attempt + 1
            _write(state, record)
        if finished.outcome == "lost":
            return SetupReport("interrupted", shown, source, attempts=attempt)
        run = CommandRun(workspace, _setup_execution(workspace, f"attempt-{attempt}"))
        report = SetupReport(
            "ran",
            shown,
            source,
            exit_code=finished.exit_code,
            outcome=finished.outcome,
            duration_s=finished.duration_s,
            tail=_tail(run, definition.secrets),
            attempts=attempt,
            refused=tuple(refused),
        )
        if finished.outcome == "exited" and finished.exit_code == 0 and self.cache is not None:
            report = replace(report, cache=await self._store(workspace, state, key, definition))
        return report

    async def _run(
        self,
        workspace: Path,
        name: str,
        command: str,
        definition: SetupDefinition,
        sandbox: Sandbox,
    ) -> tuple[Finished, list[str]]:
        """Start (or adopt) the execution ``name`` and wait for its end."""
        run = CommandRun(workspace, _setup_execution(workspace, name))
        if not run.exists():
            await launch(run, command, definition.timeout_s, sandbox)
        while isinstance(outcome := check(run), Running):
            await asyncio.sleep(self.poll_s)
        mask_logs(run, definition.secrets.values())
        return outcome, refused_hosts(run)

    async def _store(
        self, workspace: Path, state: WorkspaceState, key: str, definition: SetupDefinition
    ) -> str:
        assert self.cache is not None
        listed = await workspace_git(
            workspace,
            ["ls-files", "-z", "--others", "--ignored", "--exclude-standard", "--directory"],
        )
        if not listed.ok:
            problem = listed.stderr.strip()[-200:]
            return f"not cached: git could not list the ignored files ({problem})"
        paths = [p.rstrip("/") for p in listed.stdout.split("\0") if p.strip("/")]
        stored = await self.cache.store(
            key, definition.repo, workspace, state.home, paths, definition.secrets.values()
        )
        if isinstance(stored, str):
            log.warning("setup's environment of %s: %s", definition.repo, stored)
            return stored
        return f"stored ({stored.bytes // 2**20} MiB)"


def mark_fresh(state: WorkspaceState) -> None:
    """A new workspace, which nothing has run in: its setup (or restore) may begin."""
    _write(state, {"fresh": True})


def _command(
    definition: SetupDefinition, blobs: Mapping[str, str]
) -> tuple[str | None, Literal["operator", "repository"] | None]:
    if definition.command is not None:
        return (definition.command, "operator") if definition.command.strip() else (None, None)
    if REPOSITORY_SCRIPT in blobs:
        return f"bash {REPOSITORY_SCRIPT}", "repository"
    return None, None


async def _blobs(state: WorkspaceState) -> dict[str, str]:
    """The lockfiles' blob ids at the cloned commit, as Keel's mirror has them."""
    record = state.read_record() or {}
    sha = record.get("cloned_sha")
    if not isinstance(sha, str) or not sha:
        return {}
    listed = await git(
        ["--git-dir", str(state.mirror), "ls-tree", "-z", "--full-tree", sha, "--", *LOCKFILES]
    )
    if not listed.ok:
        return {}
    blobs: dict[str, str] = {}
    for line in listed.stdout.split("\0"):
        meta, _, path = line.partition("\t")
        parts = meta.split()
        if len(parts) == 3 and path:
            blobs[path] = f"{parts[0]}:{parts[2]}"
    return blobs


def _tail(run: CommandRun, secrets: Mapping[str, str]) -> str:
    text = read_bounded(run.log_path("stdout"), TAIL_CHARS // 2)
    errors = read_bounded(run.log_path("stderr"), TAIL_CHARS // 2)
    combined = (text.rstrip() + ("\n--- stderr ---\n" + errors.rstrip() if errors.strip() else ""))
    return mask(combined[-TAIL_CHARS:], secrets.values())


def _read(state: WorkspaceState) -> dict[str, Any]:
    try:
        data = json.loads((state.root / "setup.json").read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _write(state: WorkspaceState, record: Mapping[str, Any]) -> None:
    path = state.root / "setup.json"
    tmp = path.with_name(f"setup.json.{os.getpid()}.{time.monotonic_ns()}")
    tmp.write_text(json.dumps(record))
    os.replace(tmp, path)
