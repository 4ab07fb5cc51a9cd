"""Workspaces: per-root-task git checkouts, detached command executions and their sandbox."""

from runtime.workspace.commands import CommandRun, Finished, Running, execution_id
from runtime.workspace.paths import PathRefused, resolve_inside
from runtime.workspace.sandbox import Isolation, Limits, Sandbox, SandboxMode
from runtime.workspace.workspace import Workspaces, WorkspaceSpec

__all__ = [
    "CommandRun",
    "Finished",
    "Isolation",
    "Limits",
    "PathRefused",
    "Running",
    "Sandbox",
    "SandboxMode",
    "WorkspaceSpec",
    "Workspaces",
    "execution_id",
    "resolve_inside",
]
