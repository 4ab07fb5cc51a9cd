"""Devbox tools: what an agent does inside its workspace (files, commands, git).

Every tool reads its workspace from ``ToolContext.workspace`` (filled by the executor from
``runtime.workspace.Workspaces.ensure``) and refuses a call that has none.
"""

from runtime.tools.base import Tool
from runtime.tools.devbox.command import MaskSource, RunCommand, SecretSource
from runtime.tools.devbox.files import ApplyPatch, ListFiles, ReadFile, WriteFile
from runtime.tools.devbox.gittools import GitCommit, GitCredentials, GitPush
from runtime.workspace.sandbox import Sandbox


def devbox_tools(
    sandbox: Sandbox | None = None,
    *,
    allow_protected: bool = False,
    token: str | None = None,
    credentials: GitCredentials | None = None,
    secrets: SecretSource | None = None,
    masked: MaskSource | None = None,
) -> list[Tool]:
    """The full devbox tool set for one agent; ``credentials`` (or a fixed ``token``)
    authenticate HTTPS pushes; ``secrets`` are what a task's commands may see, ``masked``
    what their output must not show."""
    return [
        ReadFile(),
        ListFiles(),
        WriteFile(),
        ApplyPatch(),
        RunCommand(sandbox, secrets=secrets, masked=masked),
        GitCommit(),
        GitPush(allow_protected=allow_protected, token=token, credentials=credentials),
    ]


__all__ = [
    "ApplyPatch",
    "GitCommit",
    "GitCredentials",
    "GitPush",
    "ListFiles",
    "ReadFile",
    "RunCommand",
    "WriteFile",
    "devbox_tools",
]
