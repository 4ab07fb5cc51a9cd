"""How a devbox command is confined: bubblewrap isolation, a scrubbed environment, rlimits.

``auto`` uses bubblewrap when it is installed and works here, and otherwise falls back to
``none`` with one warning per process; ``bwrap`` insists on it. Under bubblewrap the whole
filesystem is read-only except the workspace and a private ``/tmp`` (the toolchains on PATH
that live under the host's ``/tmp`` stay visible, read-only; within the workspace
the execution records stay read-only, so a command cannot forge its own exit code), the
network is a fresh empty namespace unless allowed, and the environment is rebuilt from an
allow-list so no Keel, Slack, GitHub or model-provider secret reaches repository code.
Resource limits (CPU seconds, address space, file size, which also bounds the captured
output) apply in both modes through ``prlimit``.
"""

from __future__ import annotations

import logging
import os
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runtime.errors import ConfigError
from runtime.workspace.process import run_process

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "none"]
Isolation = Literal["bwrap", "none"]
SECRET_PREFIXES = ("KEEL_", "SLACK_", "GITHUB_", "GH_", "OPENAI_", "ANTHROPIC_", "AWS_")
HOME = Path(".keel") / "home"  # inside the workspace but excluded from commits
EXEC_ROOT = Path(".keel") / "exec"  # execution records: read-only to the commands they record

_bwrap_works: bool | None = None
_warned_fallback = False


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_s: int | None = 3600
    address_space_bytes: int | None = 8 * 2**30
    file_size_bytes: int | None = 2**30


@dataclass(frozen=True, slots=True)
class Sandbox:
    mode: SandboxMode = "auto"
    network: bool = False
    limits: Limits = Limits()
    extra_env: Mapping[str, str] = field(default_factory=dict)

    async def isolation(self) -> Isolation:
        """The isolation commands will actually get (probing bubblewrap once per process)."""
        match self.mode:
            case "none":
                return "none"
            case "bwrap":
                if not await bwrap_works():
                    raise ConfigError("workspace.sandbox is 'bwrap' but bubblewrap is unusable")
                return "bwrap"
            case "auto":
                if await bwrap_works():
                    return "bwrap"
                _warn_fallback_once()
                return "none"

    def env(self, workspace: Path) -> dict[str, str]:
        env = {
            "PATH": os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin"),
            "HOME": str(workspace / HOME),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
        extra = {k: v for k, v in self.extra_env.items() if not k.startswith(SECRET_PREFIXES)}
        return env | extra

    def wrap(self, argv: Sequence[str], workspace: Path, isolation: Isolation) -> list[str]:
        """``argv`` as it must be executed: limits inside, bubblewrap outside when isolating."""
        limited = [*self._prlimit(), *argv]
        if isolation == "none":
            return limited
        return [*self._bwrap(workspace), "--", *limited]

    def _bwrap(self, workspace: Path) -> list[str]:
        ws = str(workspace)
        # No --die-with-parent: the parent is the detached wrapper, and a command must outlive
        # the worker that started it; timeouts kill the whole process group instead. No
        # --new-session either, so that group still contains the sandboxed processes.
        args = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
        args += ["--tmpfs", "/tmp", *_toolchains_under_tmp(self.env(workspace)["PATH"])]
        args += ["--bind", ws, ws, "--chdir", ws]
        records = str(workspace / EXEC_ROOT)
        args += ["--ro-bind-try", records, records]
        args += ["--unshare-pid", "--unshare-ipc"]
        if not self.network:
            args.append("--unshare-net")
        args.append("--clearenv")
        for key, value in self.env(workspace).items():
            args += ["--setenv", key, value]
        return args

    def _prlimit(self) -> list[str]:
        if shutil.which("prlimit") is None:
            return []
        limits = self.limits
        flags = [
            f"--cpu={limits.cpu_s}" if limits.cpu_s else "",
            f"--as={limits.address_space_bytes}" if limits.address_space_bytes else "",
            f"--fsize={limits.file_size_bytes}" if limits.file_size_bytes else "",
        ]
        return ["prlimit", *[f for f in flags if f], "--"]


def _toolchains_under_tmp(path: str) -> list[str]:
    """Read-only binds that bring back the PATH toolchains the private ``/tmp`` would hide.

    A checkout under ``/tmp`` keeps its virtualenv there; without these binds its ``pytest``
    and ``python`` vanish inside the sandbox. The interpreter Keel runs on counts as such a
    toolchain (configured commands name it, as the demo does). A virtualenv's ``bin`` brings
    its whole root (``pyvenv.cfg`` beside it), since its packages live next to ``bin``.
    """
    tmp = Path("/tmp")
    roots: list[str] = []
    for entry in [*path.split(os.pathsep), os.path.dirname(sys.executable)]:
        directory = Path(entry)
        if not directory.is_absolute() or tmp not in directory.parents or not directory.is_dir():
            continue
        root = directory.parent if (directory.parent / "pyvenv.cfg").is_file() else directory
        if str(root) not in roots:
            roots.append(str(root))
    return [arg for root in roots for arg in ("--ro-bind", root, root)]


async def bwrap_works() -> bool:
    global _bwrap_works
    if _bwrap_works is None:
        _bwrap_works = shutil.which("bwrap") is not None and await _probe_bwrap()
    return _bwrap_works


async def _probe_bwrap() -> bool:
    probe = ["bwrap", "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    result = await run_process([*probe, "--unshare-net", "true"], timeout_s=30)
    if not result.ok:
        log.warning("bubblewrap is installed but failed its probe: %s", result.stderr.strip())
    return result.ok


def _warn_fallback_once() -> None:
    global _warned_fallback
    if not _warned_fallback:
        _warned_fallback = True
        log.warning("bubblewrap unavailable: workspace.sandbox=auto runs commands unsandboxed")
