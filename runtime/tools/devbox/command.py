"""The run_command tool: a detached, sandboxed shell command observed through a stable handle.

The handle is the execution id derived from the call id, so a worker that recovers the call
polls the same execution instead of starting a second one; ``start`` on an execution that
already exists starts nothing. What the model sees is bounded (head and tail of each
stream); the full logs stay in the execution folder. A command recognised as a test run
yields ``test_run`` evidence with the counts its runner printed. A stop of the task cancels
the call: the command's processes are killed, or, if it was not launched yet, it never is.
What the egress proxy refused is named on a line of its own. Secrets (the sandbox's, and the
task's from ``secrets``) reach the command's environment, and their values are masked
wherever the command printed them.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import Field

from runtime.evidence import EvidenceItem, Strength
from runtime.testreport import (
    TestCounts,
    junit_xml_path,
    looks_like_test_command,
    parse_junit_xml,
    parse_test_output,
)
from runtime.tools.base import (
    Completed,
    Effect,
    Pending,
    Started,
    Stopped,
    ToolContext,
    Unknown,
)
from runtime.tools.devbox.calls import ToolArgs, prepare, refused, schema, workspace_of
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
    read_meta,
    refused_hosts,
    stop,
)
from runtime.workspace.paths import PathRefused, read_inside_text
from runtime.workspace.sandbox import Sandbox

_HANDLE = re.compile(r"^[0-9a-f]{16}$")
JUNIT_LIMIT = 8_000_000
REFUSED_SHOWN = 10
# The secrets a task's commands may see, by task id: asked again at every report, so a worker
# that recovers the call masks them too.
SecretSource = Callable[[str], Awaitable[Mapping[str, str]]]
# Values masked in a task's command output though the command was not given them.
MaskSource = Callable[[str], Awaitable[Collection[str]]]


class RunCommandArgs(ToolArgs):
    command: str = Field(min_length=1, description="a bash command, run in the workspace root")
    timeout_s: int = Field(600, ge=1, le=86_400, description="wall-clock limit in seconds")


class RunCommand:
    name = "run_command"
    description = (
        "Run a shell command in the workspace (sandboxed; no network unless allowed) and "
        "return its exit code and the head and tail of its output."
    )
    parameters = schema(RunCommandArgs)
    effect: Effect = "wait"

    def __init__(
        self,
        sandbox: Sandbox | None = None,
        *,
        output_limit: int = 4096,
        secrets: SecretSource | None = None,
        masked: MaskSource | None = None,
    ) -> None:
        self.sandbox = sandbox or Sandbox()
        self.output_limit = output_limit
        self.secrets = secrets
        self.masked = masked

    async def start(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Started:
        prepared = prepare(RunCommandArgs, args, ctx)
        if isinstance(prepared, Completed):
            return prepared
        parsed, ws = prepared
        run = CommandRun(ws, execution_id(ctx.task_id, ctx.call_id))
        sandbox = replace(self.sandbox, secrets=await self._secrets(ctx))
        await launch(run, parsed.command, parsed.timeout_s, sandbox)
        return Started(handle=run.exec_id)

    async def poll(self, handle: str, ctx: ToolContext) -> Pending | Completed:
        ws = workspace_of(ctx)
        if isinstance(ws, Completed):
            return ws
        run = CommandRun(ws, handle)
        if not _HANDLE.fullmatch(handle) or not run.exists():
            return refused(f"no command execution {handle!r} in this workspace")
        match check(run):
            case Running(elapsed_s=elapsed):
                return Pending(detail=f"running for {elapsed:.0f}s")
            case Finished() as finished:
                return self._report(run, finished, await self._hidden(ctx))

    async def reconcile(self, args: dict[str, Any], ctx: ToolContext) -> Completed | Unknown:
        return Unknown("run_command is a wait tool: recovery polls its handle")

    async def cancel(
        self, handle: str | None, ctx: ToolContext, reason: str
    ) -> Stopped | Completed:
        ws = workspace_of(ctx)
        if isinstance(ws, Completed):
            return ws
        run = CommandRun(ws, handle or execution_id(ctx.task_id, ctx.call_id))
        if not _HANDLE.fullmatch(run.exec_id):
            return refused(f"no command execution {run.exec_id!r} in this workspace")
        finished = stop(run)
        secrets = await self._hidden(ctx)
        if finished.outcome != "stopped":
            return self._report(run, finished, secrets)  # it ended on its own before the stop
        outcome = f"{verdict(finished, 0)} ({reason})"
        mask_logs(run, secrets)
        return Stopped(self._output(run, outcome, secrets))

    async def _secrets(self, ctx: ToolContext) -> dict[str, str]:
        granted = await self.secrets(ctx.task_id) if self.secrets else {}
        return {**self.sandbox.secrets, **granted}

    async def _hidden(self, ctx: ToolContext) -> list[str]:
        """Every value to mask: the command's own secrets, and the repository's others
        (setup may have left one in the home or the workspace)."""
        others = await self.masked(ctx.task_id) if self.masked else ()
        return [*(await self._secrets(ctx)).values(), *others]

    def _report(self, run: CommandRun, finished: Finished, secrets: Sequence[str]) -> Completed:
        mask_logs(run, secrets)
        meta = read_meta(run)
        outcome = verdict(finished, meta.timeout_s if meta else 0)
        output = self._output(run, outcome, secrets)
        command = mask(meta.command, secrets) if meta else "(unrecorded command)"
        tested = test_evidence(run, command, finished)
        refusals = tuple(
            EvidenceItem("network_refused", host, Strength.tool_reported, {"command": command})
            for host in refused_hosts(run)
        )
        return Completed(
            output=output,
            is_error=finished.outcome != "exited",
            evidence=((tested,) if tested else ()) + refusals,
        )

    def _output(self, run: CommandRun, outcome: str, secrets: Sequence[str]) -> str:
        meta = read_meta(run)
        command = meta.command if meta else "(unrecorded command)"
        streams = [self._stream(run, "stdout"), self._stream(run, "stderr")]
        network = refusal_line(refused_hosts(run))
        text = "\n".join([f"$ {command}", outcome, *network, *streams])
        return mask(text, secrets)

    def _stream(self, run: CommandRun, stream: Literal["stdout", "stderr"]) -> str:
        path = run.log_path(stream)
        body = read_bounded(path, self.output_limit)
        if not body:
            return f"--- {stream}: empty"
        return f"--- {stream} (Keel keeps the full log of execution {run.exec_id}) ---\n{body}"


def refusal_line(refused: list[str]) -> list[str]:
    """The line naming what the egress proxy refused, if it refused anything."""
    if not refused:
        return []
    shown = ", ".join(refused[:REFUSED_SHOWN])
    more = f" and {len(refused) - REFUSED_SHOWN} more" if len(refused) > REFUSED_SHOWN else ""
    return [f"network: refused {shown}{more} (not in this agent's allowlist)"]


def verdict(finished: Finished, timeout_s: float) -> str:
    match finished.outcome:
        case "exited":
            return f"exit code {finished.exit_code} after {finished.duration_s:.1f}s"
        case "timed_out":
            return f"timed out after {timeout_s:.0f}s; its process group was killed"
        case "stopped" if finished.duration_s > 0:
            return f"stopped after {finished.duration_s:.1f}s; its process group was killed"
        case "stopped":
            return "stopped before it started; it never ran"
        case "lost":
            return "the process ended without recording an exit code (killed outside Keel?)"


def test_evidence(run: CommandRun, command: str, finished: Finished) -> EvidenceItem | None:
    # unittest prints its summary on stderr; pytest and the JUnit-style runners on stdout.
    counts = junit_counts(run.workspace, command) or next(
        (
            found
            for stream in ("stdout", "stderr")
            if (found := parse_test_output(read_bounded(run.log_path(stream), 64 * 1024)))
        ),
        None,
    )
    if counts is None and not looks_like_test_command(command):
        return None
    detail: dict[str, Any] = {
        "command": command,
        "exit_code": finished.exit_code,
        "outcome": finished.outcome,
        "duration_s": finished.duration_s,
        "log": f"exec/{run.exec_id}/stdout",
    }
    detail |= _counts(counts)
    return EvidenceItem(
        kind="test_run", ref=run.exec_id, strength=Strength.tool_reported, detail=detail
    )


def _counts(counts: TestCounts | None) -> dict[str, int | str | None]:
    if counts is None:
        return {"passed": None, "failed": None, "errors": None, "skipped": None}
    return {
        "passed": counts.passed,
        "failed": counts.failed,
        "errors": counts.errors,
        "skipped": counts.skipped,
        "report": counts.source,
    }


def junit_counts(ws: Path, command: str) -> TestCounts | None:
    report = junit_xml_path(command)
    if report is None:
        return None
    try:
        return parse_junit_xml(read_inside_text(ws, report, JUNIT_LIMIT))
    except (PathRefused, OSError):
        return None
