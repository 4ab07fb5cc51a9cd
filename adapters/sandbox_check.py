"""Whether commands can run the way ``workspace.sandbox`` says, in words an operator can act on.

``keel config check`` and ``/readyz`` both ask here so they name the same fix. ``auto`` and
``bwrap`` need bubblewrap to start: without it Keel refuses to run commands (it fails closed,
#37), so the check fails too. ``none`` runs commands unsandboxed; that works, and every look
at it says so as a warning, because it is a choice an operator must have made on purpose.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass

from runtime.workspace.sandbox import SandboxMode, bwrap_works

NONE_WARNING = (
    "workspace.sandbox is none: commands run unsandboxed, so repository code and a "
    "prompt-injected model can read Keel's secrets, files and database"
)


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    ok: bool  # commands can run as configured
    line: str  # what to print: the isolation they get, or what is wrong and how to fix it
    warning: str | None = None  # set when they run, but unsandboxed


async def sandbox_status(mode: SandboxMode) -> SandboxStatus:
    """Probe bubblewrap for ``auto``/``bwrap`` (once per process: ``bwrap_works`` caches)."""
    if mode == "none":
        return SandboxStatus(True, "sandbox: none (commands run unsandboxed)", NONE_WARNING)
    if await bwrap_works():
        return SandboxStatus(True, f"sandbox: bubblewrap works (workspace.sandbox: {mode})")
    return SandboxStatus(False, _unavailable(mode))


def _unavailable(mode: SandboxMode) -> str:
    if shutil.which("bwrap") is None:
        problem, fix = "is not installed", "install it (apt-get install bubblewrap)"
    else:
        problem = "is installed but cannot start here"
        fix = (
            "allow unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1, or "
            "kernel.apparmor_restrict_unprivileged_userns=0; in a container, a seccomp "
            "profile that permits them)"
        )
    return (
        f"workspace.sandbox is {mode} and bubblewrap {problem}, so no command can run. "
        f"To fix: {fix}, or set workspace.sandbox: none to run commands unsandboxed "
        "(they can then read Keel's secrets)"
    )
