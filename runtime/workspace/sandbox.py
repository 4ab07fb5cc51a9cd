"""How a devbox command is confined: bubblewrap isolation, a scrubbed environment, rlimits.

``auto`` and ``bwrap`` both insist on bubblewrap: when it is missing or cannot start, no
command runs and the error says how to fix it. Only an explicit ``none`` runs commands
unsandboxed, and ``keel config check`` and ``/readyz`` warn about it.

Under bubblewrap a command sees a filesystem built for it, not the host's, assembled only from
paths Keel created or the operator configured, never from anything in the workspace:

- the system directories read-only (``/usr``, ``/bin``, ``/sbin``, ``/lib*``, ``/etc``), with
  the host's secrets in ``/etc`` (shadow files, sudoers, SSH host keys, ``/etc/keel``) masked;
- its own workspace read-write; a private ``/tmp`` and ``$HOME`` from the workspace's state
  folder beside it (``runtime.workspace.state``), which no command can see or replace;
- the toolchains on PATH read-only: each PATH directory, a virtualenv's whole root and the
  prefix of its interpreter, a pyenv root for its shims; plus ``workspace.readonly_paths``.
  A ``pyvenv.cfg`` inside the workspace adds nothing: its interpreter must already be shown;
- a fresh ``/dev`` and a ``/proc`` of its own PID namespace.

It runs in a user namespace with every capability dropped (``CapEff`` 0 even when Keel runs
as root), with no new privileges and no further user namespaces. Nothing else exists inside:
not ``/root``, ``/home``, ``/var/lib``, other workspaces, nor Keel's database or configuration
(``hidden``, masked again should a toolchain path contain them). The network is a fresh empty
namespace unless ``egress`` is ``on`` (the host's) or ``allowlist`` (still empty, with Keel's
egress proxy as the only way out: ``runtime.workspace.egress``), and the environment is
rebuilt from an allow-list so no Keel, Slack, GitHub or model-provider secret reaches
repository code; only ``secrets``, which the operator grants a command by name, are passed
as given, and never written to a file (see ``_with_secrets``). Resource limits (CPU seconds,
address space, file size, which also bounds the captured output) apply in both modes, set by
the wrapper's shell before it starts the sandbox.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import re
import shlex
import shutil
import stat
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from runtime.errors import ConfigError
from runtime.workspace import cgroups, egress_bridge
from runtime.workspace.egress import Egress
from runtime.workspace.process import run_process
from runtime.workspace.state import WorkspaceState, ensure_real_dir

log = logging.getLogger(__name__)

SandboxMode = Literal["auto", "bwrap", "none"]
Isolation = Literal["bwrap", "none"]
HOME_BINS = (".local/bin", ".cargo/bin", "go/bin")
SECRET_PREFIXES = ("KEEL_", "SLACK_", "GITHUB_", "GH_", "OPENAI_", "ANTHROPIC_", "AWS_")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
# Secrets are also in the environment of the wrapper's shell and of bubblewrap, which these
# names would steer: they are Keel's to set, or no one's.
_RESERVED = ("PATH", "HOME", "LANG", "TERM", "BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "IFS")

SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc")
ETC_SECRETS = (
    "/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers",
    "/etc/sudoers.d", "/etc/ssl/private", "/etc/security/opasswd", "/etc/keel",
)

# Never shown, whatever PATH, readonly_paths or a virtualenv names: the kernel's views of
# the host and the whole filesystem.
NEVER_SHOWN = ("/proc", "/sys", "/dev", "/run")
# A user namespace with no capabilities and none to make (CapEff 0, as root too), its own PID
# namespace (its /proc shows only itself; it cannot signal Keel) whose first process is the
# command itself, so that nothing it started outlives it (bubblewrap's own init would wait
# for every background process), and IPC namespace (no shared memory of the host's,
# PostgreSQL's included). bubblewrap always sets no_new_privs.
NAMESPACES = (
    "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
    "--unshare-pid", "--as-pid-1", "--unshare-ipc",
)
HOW_TO_FIX = (
    "install bubblewrap (apt-get install bubblewrap) and allow unprivileged user namespaces "
    "(or run Keel outside a seccomp profile that forbids them), or set workspace.sandbox: "
    "none to run repository code unsandboxed, with access to Keel's secrets"
)

_bwrap_works: bool | None = None
_bwrap_problem = ""


@dataclass(frozen=True, slots=True)
class Limits:
    cpu_s: int | None = 3600
    address_space_bytes: int | None = 8 * 2**30
    file_size_bytes: int | None = 2**30


@dataclass(frozen=True, slots=True)
class Sandbox:
    mode: SandboxMode = "auto"
    egress: Egress = field(default_factory=Egress)
    limits: Limits = Limits()
    extra_env: Mapping[str, str] = field(default_factory=dict)
    readonly_paths: tuple[Path, ...] = ()  # toolchains elsewhere, shown read-only
    hidden: tuple[Path, ...] = ()  # Keel's own files: never visible, whatever else is shown
    secrets: Mapping[str, str] = field(default_factory=dict)  # in the command's env as given

    def __post_init__(self) -> None:
        if bad := [name for name in self.secrets if not _secret_name(name)]:
            raise ConfigError(
                f"secrets {bad}: a secret's name must be an environment variable name that "
                f"Keel, bash and the loader do not use themselves ({', '.join(_RESERVED)}, LD_*)"
            )

    async def isolation(self) -> Isolation:
        """The isolation commands will actually get (probing bubblewrap once per process)."""
        match self.mode:
            case "none":
                return "none"
            case "bwrap" | "auto":
                if not await bwrap_works():
                    raise ConfigError(
                        f"workspace.sandbox is {self.mode!r} but bubblewrap cannot start here "
                        f"({bwrap_problem()}); no command was run. To fix: {HOW_TO_FIX}"
                    )
                return "bwrap"

    def env(self, workspace: Path) -> dict[str, str]:
        home = WorkspaceState(workspace).home
        # What a setup step installed in the home comes first (``uv``, ``rustup``, ``go
        # install`` put their programs there); the home is the command's own, never shown
        # read-only as a toolchain.
        own = [str(home / folder) for folder in HOME_BINS]
        env = {
            "PATH": os.pathsep.join([*own, absolute_path()]),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "TERM": "dumb",
        }
        extra = {k: v for k, v in self.extra_env.items() if not k.startswith(SECRET_PREFIXES)}
        return env | extra

    def launcher_env(self, workspace: Path) -> dict[str, str]:
        """The environment of the process that starts the sandbox: ``env`` and the secrets,
        which reach the command from there rather than from its argv (see ``_with_secrets``).
        Its PATH is Keel's own: the wrapper runs on the host, where a program a command left
        in its home must never be found."""
        return self.env(workspace) | {"PATH": absolute_path()} | dict(self.secrets)

    def wrap(
        self,
        argv: Sequence[str],
        workspace: Path,
        isolation: Isolation,
        *,
        egress_socket: Path | None = None,
    ) -> list[str]:
        """``argv`` as it must be executed: inside bubblewrap when isolating, behind the egress
        bridge to the proxy listening on ``egress_socket`` when the egress is an allowlist.
        The resource limits are the caller's to set on the process (``ulimits``): they are
        inherited. Without bubblewrap nothing is confined, the network included."""
        state = WorkspaceState(workspace).ensure()
        if isolation == "none":
            return list(argv)
        options = self._bwrap(workspace, state)
        if self.egress.mode == "allowlist":
            if egress_socket is None:
                raise ValueError("an allowlisted sandbox needs its egress proxy's socket")
            options += ["--ro-bind", str(egress_socket), egress_bridge.SOCKET]
            argv = egress_bridge.bridged(argv)
        if self.secrets:
            return _with_secrets(options, argv, list(self.secrets))
        return [*options, "--", *argv]

    def ulimits(self) -> str:
        """The shell builtin that applies ``limits`` to what the shell runs next (no process
        of its own, unlike prlimit): CPU seconds, address space and file size in KiB."""
        limits = self.limits
        flags = [
            f"-t {limits.cpu_s}" if limits.cpu_s else "",
            f"-v {limits.address_space_bytes // 1024}" if limits.address_space_bytes else "",
            f"-f {limits.file_size_bytes // 1024}" if limits.file_size_bytes else "",
        ]
        used = [f for f in flags if f]
        return f"ulimit {' '.join(used)}" if used else ""

    def _bwrap(self, workspace: Path, state: WorkspaceState) -> list[str]:
        ws = str(workspace.absolute())
        ensure_real_dir(workspace)
        # No --die-with-parent: the parent is the detached wrapper, and a command must outlive
        # the worker that started it; timeouts kill the whole process group instead. No
        # --new-session either, so that group still contains the sandboxed processes.
        args = ["bwrap", *_system_binds(), "--dev", "/dev", "--proc", "/proc"]
        args += ["--bind", str(state.tmp), "/tmp"]
        clear_mount_points(state.tmp, [workspace.absolute(), state.home])
        shown = toolchain_roots(absolute_path(), workspace, self.readonly_paths)
        shown = [root for root in shown if not _within(Path(root), [str(h) for h in self.hidden])]
        for root in shown:
            args += ["--ro-bind", root, root]
        if self.egress.mode == "on":
            args += _resolver_binds()
        secrets = [*host_secrets(), *self.hidden]
        args += _masks(secrets, visible=[*SYSTEM_DIRS, *shown])
        args += ["--bind", ws, ws, "--bind", str(state.home), str(state.home), "--chdir", ws]
        args += NAMESPACES
        if self.egress.mode != "on":
            args.append("--unshare-net")
        args.append("--clearenv")
        env = self.env(workspace)
        if self.egress.mode == "allowlist":
            env |= egress_bridge.proxy_env()
        for key, value in env.items():
            args += ["--setenv", key, value]
        return args


def _secret_name(name: str) -> bool:
    return bool(_ENV_NAME.fullmatch(name)) and name not in _RESERVED and not name.startswith(
        ("LD_", "BASH_FUNC_")
    )


def _with_secrets(options: list[str], argv: Sequence[str], names: list[str]) -> list[str]:
    """bubblewrap started by a shell that adds ``--setenv NAME "$NAME"`` for each secret,
    expanding its value from the environment it inherited (``launcher_env``): the wrapper
    script, which is a file, holds the names only."""
    pairs = " ".join(f'--setenv {name} "${name}"' for name in names)
    # Not on bubblewrap's command line, which every user of the host may read in /proc: the
    # pairs come through a pipe (``--args``), written by printf, a builtin (no argv of its
    # own; the subshell's is this line, with the names only).
    feed = f"3< <(printf '%s\\0' {pairs})"
    line = f'exec {shlex.join(options)} --args 3 -- "$@" {feed}'
    return [host_program("bash"), "-c", line, "keel-sandbox", *argv]


def absolute_path() -> str:
    """Keel's PATH without relative entries (``.``, empty), which would resolve a program
    against the workspace when Keel starts one there."""
    entries = os.environ.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(os.pathsep)
    return os.pathsep.join(e for e in entries if os.path.isabs(e)) or "/usr/bin:/bin"


def host_program(name: str) -> str:
    """The absolute path of a program Keel runs itself, found on the absolute PATH only."""
    found = shutil.which(name, path=absolute_path())
    if found is None:
        raise ConfigError(f"{name} is not installed (looked on PATH)")
    return found


def _system_binds() -> list[str]:
    """The system directories, read-only; merged-/usr symlinks (``/bin -> usr/bin``) stay links."""
    args: list[str] = []
    for directory in SYSTEM_DIRS:
        if os.path.islink(directory):
            args += ["--symlink", os.readlink(directory), directory]
        elif os.path.isdir(directory):
            args += ["--ro-bind", directory, directory]
    return args


def toolchain_roots(path: str, workspace: Path, extra: Iterable[Path] = ()) -> list[str]:
    """The host directories outside the system ones that commands need, read-only.

    Every PATH directory and the interpreter Keel runs on (configured commands name it, as the
    demo does). A virtualenv's ``bin`` brings its root (its packages live beside ``bin``) and
    the prefix of the interpreter it was made from (``home`` in ``pyvenv.cfg``, often under
    ``/root/.pyenv`` or ``/opt``); a pyenv ``shims`` directory brings its pyenv root. Nothing
    in the workspace chooses a mount: a virtualenv the repository makes works when its
    interpreter is one of these, and PATH entries inside the workspace are skipped (their
    ``pyvenv.cfg`` is the repository's to write). ``/``, ``/proc``, ``/sys``, ``/dev`` and
    ``/run`` are never shown, whoever names them.
    """
    candidates = [Path(p) for p in path.split(os.pathsep) if p]
    candidates.append(Path(sys.executable).parent)
    roots: list[Path] = [Path(p) for p in extra if Path(p).is_absolute() and Path(p).exists()]
    for directory in candidates:
        if not directory.is_absolute() or not directory.is_dir():
            continue
        if _within(directory, [str(workspace)]):
            continue
        venv = directory.parent / "pyvenv.cfg"
        if venv.is_file():
            roots += [directory.parent, *_interpreter_prefix(venv)]
        elif directory.name == "shims" and (directory.parent / "libexec" / "pyenv").exists():
            roots.append(directory.parent)
        else:
            roots.append(directory)
    shown: list[str] = []
    for root in roots:
        if _forbidden(root):
            continue
        if _within(root, [*SYSTEM_DIRS, *shown]) or _within(root, [str(workspace)]):
            continue
        shown = [s for s in shown if not _within(Path(s), [str(root)])] + [str(root)]
    return shown


def _interpreter_prefix(pyvenv_cfg: Path) -> list[Path]:
    for line in pyvenv_cfg.read_text(encoding="utf-8", errors="replace").splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home" and value.strip():
            home = Path(value.strip())
            prefix = home.parent if home.name == "bin" else home
            return [prefix] if prefix.is_absolute() and prefix.is_dir() else []
    return []


def _forbidden(root: Path) -> bool:
    """Roots whose mount would hand the host over: ``/`` itself, or its kernel views."""
    resolved = root.resolve()
    return resolved == Path("/") or _within(resolved, NEVER_SHOWN)


def _within(path: Path, roots: Iterable[str]) -> bool:
    return _under(os.path.realpath(path), [os.path.realpath(root) for root in roots])


def _under(resolved: str, bases: Sequence[str]) -> bool:
    """``resolved`` is one of ``bases`` or inside one (all absolute and already resolved)."""
    return any(
        resolved == base or resolved.startswith(base.rstrip("/") + "/") for base in bases
    )


def _masks(paths: Iterable[Path], visible: Iterable[str]) -> list[str]:
    """Over-mount each existing path that would otherwise be visible: a directory with an
    empty tmpfs, a file with ``/dev/null``."""
    bases = [os.path.realpath(root) for root in visible]  # once: a launch checks many paths
    args: list[str] = []
    for path in paths:
        if not path.is_absolute() or not (path.exists() or path.is_symlink()):
            continue
        if not _under(os.path.realpath(path), bases):
            continue
        args += ["--tmpfs", str(path)] if path.is_dir() else ["--ro-bind", "/dev/null", str(path)]
    return args


def _resolver_binds() -> list[str]:
    """With the host network, ``/etc/resolv.conf`` may point outside ``/etc`` (systemd)."""
    target = Path("/etc/resolv.conf").resolve()
    if _within(target, ["/etc"]) or not target.is_file():
        return []
    return ["--ro-bind", str(target), str(target)]


async def bwrap_works() -> bool:
    """Whether bubblewrap starts here with every namespace a command gets (probed once)."""
    global _bwrap_works, _bwrap_problem
    if _bwrap_works is None:
        if shutil.which("bwrap") is None:
            _bwrap_works, _bwrap_problem = False, "bubblewrap is not installed"
        else:
            _bwrap_works, _bwrap_problem = await _probe_bwrap()
    return _bwrap_works


def bwrap_problem() -> str:
    """Why the last probe found bubblewrap unusable ("" when it works or was not probed)."""
    return _bwrap_problem


async def _probe_bwrap() -> tuple[bool, str]:
    probe = ["bwrap", *_system_binds(), "--dev", "/dev", "--proc", "/proc", *NAMESPACES]
    result = await run_process([*probe, "--unshare-net", "true"], timeout_s=30)
    if result.ok:
        return True, ""
    problem = result.stderr.strip()[-300:] or f"exit code {result.returncode}"
    log.warning("bubblewrap is installed but failed its probe: %s", problem)
    return False, f"bubblewrap failed to start: {problem}"


def confined(
    argv: Sequence[str],
    workspace: Path,
    env: Mapping[str, str],
    *,
    hidden: Iterable[Path] = (),
    limits: Limits = Limits(),
    group: Path | None = None,
) -> list[str]:
    """``argv`` in the narrowest sandbox: the system directories, the workspace and its
    ``/tmp``, no network, the same resource limits and hidden files as a command's, inside
    the process-count ``group`` when there is one. For Keel's own git in a workspace, which
    needs no toolchain.

    One shell on the host joins the group and sets the limits, then becomes bubblewrap: the
    sandbox and all it starts inherit both (a shell per launch is a few milliseconds)."""
    state = WorkspaceState(workspace).ensure()
    ensure_real_dir(workspace)
    ws = str(workspace.absolute())
    secrets = [*host_secrets(), *hidden]
    args = ["bwrap", *_system_binds(), "--dev", "/dev", "--proc", "/proc"]
    args += _masks(secrets, visible=SYSTEM_DIRS)
    args += ["--bind", str(state.tmp), "/tmp", "--bind", ws, ws, "--chdir", ws]
    clear_mount_points(state.tmp, [workspace.absolute()])
    args += [*NAMESPACES, "--unshare-net", "--clearenv"]
    for key, value in env.items():
        args += ["--setenv", key, value]
    line = f"{cgroups.join_line(group)} 2>/dev/null; " if group is not None else ""
    if ulimits := Sandbox(limits=limits).ulimits():
        line += f"{ulimits} && "
    line += 'exec "$@"'
    return [host_program("bash"), "-c", line, "keel-sandbox", *args, "--", *argv]


def host_secrets() -> list[Path]:
    """What the host hides from other users under ``/etc``, masked in every sandbox: the
    known secrets, and every file or folder there that is not world-readable (a sandbox run
    by root would otherwise own them all: its user namespace maps it to root)."""
    return [
        *map(Path, ETC_SECRETS),
        *Path("/etc/ssh").glob("ssh_host_*key"),
        *_private_etc(etc_version()),
    ]


def etc_version() -> tuple[float, ...]:
    """Changes when an entry is added to ``/etc`` or to one of its folders (their mtimes),
    so a root-only file created there after Keel started is masked too."""
    stamps = [os.stat("/etc").st_mtime]
    with os.scandir("/etc") as entries:
        for entry in entries:
            if entry.is_dir(follow_symlinks=False):
                with contextlib.suppress(OSError):
                    stamps.append(entry.stat(follow_symlinks=False).st_mtime)
    return tuple(stamps)


@functools.lru_cache(maxsize=1)
def _private_etc(version: tuple[float, ...]) -> tuple[Path, ...]:
    found: list[Path] = []
    for folder, dirs, files in os.walk("/etc", onerror=lambda e: None):
        kept = []
        for name in dirs:
            path = Path(folder, name)
            if os.path.islink(path):
                continue
            if _world(path, stat.S_IROTH | stat.S_IXOTH):
                kept.append(name)
            else:
                found.append(path)
        dirs[:] = kept
        found += [
            Path(folder, name)
            for name in files
            if not os.path.islink(Path(folder, name))
            and not _world(Path(folder, name), stat.S_IROTH)
        ]
    return tuple(found)


def _world(path: Path, bits: int) -> bool:
    try:
        return os.lstat(path).st_mode & bits == bits
    except OSError:
        return True


def clear_mount_points(tmp: Path, destinations: Iterable[Path]) -> None:
    """Make the folders bubblewrap mounts on inside the command's ``/tmp`` real folders again.

    A workspace under ``/tmp`` (as in tests) is mounted on folders bubblewrap creates in the
    persistent ``/tmp``, where the last command could have left a link or a file in their
    place: the next sandbox would then fail to start. Each folder on the way is opened
    without following links; whatever stands in for one is moved aside.
    """
    for destination in destinations:
        try:
            relative = destination.relative_to("/tmp")
        except ValueError:
            continue
        fd = os.open(tmp, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        try:
            for name in relative.parts:
                fd = _enter_real_dir(fd, name)
        finally:
            os.close(fd)


def _enter_real_dir(fd: int, name: str) -> int:
    """The descriptor of folder ``name`` in ``fd`` (closing ``fd``), made a real folder."""
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW
    try:
        try:
            child = os.open(name, flags, dir_fd=fd)
        except FileNotFoundError:
            os.mkdir(name, 0o755, dir_fd=fd)
            child = os.open(name, flags, dir_fd=fd)
        except OSError:  # a link (ELOOP) or a file (ENOTDIR) in its place
            aside = f".moved-by-keel-{os.urandom(4).hex()}"
            os.rename(name, aside, src_dir_fd=fd, dst_dir_fd=fd)
            os.mkdir(name, 0o755, dir_fd=fd)
            child = os.open(name, flags, dir_fd=fd)
    finally:
        os.close(fd)
    return child
