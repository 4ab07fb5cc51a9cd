"""Detached command executions, recorded in ``exec/<exec id>/`` of the workspace's state
folder (``runtime.workspace.state``: beside the workspace, where no command can reach).

The folder is the execution's whole record, so any process can find it again: ``meta.json``
(command, timeout, creation time), ``run.sh`` (the wrapper), ``pid``, ``started_at``,
``stdout``, ``stderr``, ``finished_at`` and ``exit``. The wrapper runs in its own session
(``setsid --fork``: a new session, reparented away from the worker) so it outlives the worker
that launched it, and publishes ``exit`` with ``ln``, which fails if the file exists: the
first of "the command ended" and "Keel gave up on it" (timeout, stop, vanished process) wins,
once. A wrapper that finds ``exit`` already published after recording its pid runs nothing, so
a stop that comes before the command started (even before it was launched) keeps it from
ever starting.

A command whose egress is an allowlist (under bubblewrap) gets its own egress proxy
(``runtime.workspace.egress_proxy``): Keel writes the allowlist to ``egress-allow``; the
wrapper starts the proxy on the host, waits (at most ``PROXY_START_S``) for its socket
``egress.sock``, and only then starts the sandbox, into which that socket is bound; if the
socket never appears the command is not run, and exits ``PROXY_FAILED_EXIT`` with a line on
its stderr. The proxy records what it refused in ``refused`` and its own log in
``egress.log``. It runs in a session of its own, so that the wrapper kills all of its
processes at once when the command has ended; ``kill_tree`` reaches it as a descendant of
the wrapper, and the proxy also exits by itself once its wrapper is gone.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from runtime.workspace import cgroups
from runtime.workspace.egress import (
    PROXY_START_S,
    SOCKET_FILE,
    proxy_argv,
    read_refused,
    write_allowlist,
)
from runtime.workspace.process import kill_below, run_process
from runtime.workspace.sandbox import Sandbox, host_program
from runtime.workspace.state import WorkspaceState, ensure_real_dir

LAUNCH_GRACE_S = 30.0  # a folder with no pid after this long was never launched
PROXY_FAILED_EXIT = 125  # as container runners do when they, not the command, failed
Outcome = Literal["exited", "timed_out", "stopped", "lost"]
_KEEL_VERDICTS: tuple[Outcome, ...] = ("timed_out", "stopped", "lost")


@dataclass(frozen=True, slots=True)
class Running:
    elapsed_s: float


@dataclass(frozen=True, slots=True)
class Finished:
    exit_code: int
    outcome: Outcome
    duration_s: float


def execution_id(task_id: str, call_id: str) -> str:
    """Stable across processes: recovery of the same call finds the same execution. The task
    is part of it because call ids are only unique within a task, and a child task shares its
    parent's workspace: the same call id there must not find the parent's execution."""
    return hashlib.sha256(f"{task_id}\0{call_id}".encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class CommandRun:
    workspace: Path
    exec_id: str

    @property
    def folder(self) -> Path:
        return WorkspaceState(self.workspace).exec_root / self.exec_id

    def log_path(self, stream: Literal["stdout", "stderr"]) -> Path:
        return self.folder / stream

    def exists(self) -> bool:
        return self.folder.exists()


@dataclass(frozen=True, slots=True)
class Meta:
    command: str
    timeout_s: float
    created_at: float


def read_meta(run: CommandRun) -> Meta | None:
    """None when a crash came between claiming the folder and recording the command."""
    try:
        record = json.loads((run.folder / "meta.json").read_text())
        return Meta(str(record["command"]), float(record["timeout_s"]), float(record["created_at"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


async def launch(run: CommandRun, command: str, timeout_s: int, sandbox: Sandbox) -> bool:
    """Start ``command`` detached; False (and nothing started) if this execution exists."""
    isolation = await sandbox.isolation()  # before claiming, so a refusal leaves no trace
    WorkspaceState(run.workspace).ensure()
    try:
        run.folder.mkdir()
    except FileExistsError:
        ensure_real_dir(run.folder)
        return False
    meta = {
        "command": command,
        "timeout_s": timeout_s,
        "created_at": time.time(),
        "isolation": isolation,
        "egress": sandbox.egress.mode,
    }
    _write_atomic(run.folder / "meta.json", json.dumps(meta))
    proxied = isolation == "bwrap" and sandbox.egress.mode == "allowlist"
    if proxied:
        write_allowlist(run.folder, sandbox.egress)
    socket = run.folder / SOCKET_FILE if proxied else None
    # bash by its host path: inside, PATH starts with the home, where a command may leave one.
    bash = [host_program("bash"), "-c", command]
    argv = sandbox.wrap(bash, run.workspace, isolation, egress_socket=socket)
    proxy = [host_program("setsid"), *proxy_argv(run.folder)] if proxied else None
    script = run.folder / "run.sh"
    group = cgroups.make_group(_group_name(run))
    joined = (cgroups.join_line(group), cgroups.leave_line(group))
    script.write_text(wrapper_script(run.folder, argv, sandbox.ulimits(), joined, proxy))
    launcher = [host_program("setsid"), "--fork", host_program("bash"), str(script)]
    env = sandbox.launcher_env(run.workspace)
    result = await run_process(launcher, cwd=run.workspace, env=env)
    if not result.ok:  # recorded as the execution's outcome; polling reports it
        run.log_path("stderr").write_text(f"could not launch: {result.stderr}")
        settle(run, -1, "lost")
    return True


def _group_name(run: CommandRun) -> str:
    return f"exec-{run.exec_id}"


def _release(run: CommandRun) -> None:
    """Remove the run's process-count group once it has ended (best effort)."""
    cgroups.remove_group(cgroups.existing_group(_group_name(run)))


def wrapper_script(
    folder: Path,
    argv: list[str],
    limits: str = "",
    group: tuple[str, str] = (":", ":"),
    proxy: list[str] | None = None,
) -> str:
    d = shlex.quote(str(folder))
    # The limits go on a subshell that becomes the command, so the wrapper keeps its own.
    run = f"( {limits} && exec {shlex.join(argv)} )" if limits else shlex.join(argv)
    command = [f'{run} > "$d/stdout" 2> "$d/stderr"', "rc=$?"]
    return "\n".join(
        [
            "exec </dev/null >/dev/null 2>&1",  # release the launcher's pipes at once
            f"d={d}",
            group[0],  # into the run's process-count group first, so all it starts is counted
            'echo $$ > "$d/pid.tmp" && mv -f "$d/pid.tmp" "$d/pid"',
            '[ -e "$d/exit" ] && exit 0',  # stopped before it began: after the pid, see stop()
            'date +%s.%N > "$d/started_at"',
            *(_behind_proxy(proxy, command) if proxy else command),
            group[1],
            'date +%s.%N > "$d/finished_at"',
            'echo "$rc" > "$d/exit.$$" && ln "$d/exit.$$" "$d/exit"',
            'rm -f "$d/exit.$$"',
            "",
        ]
    )


def _behind_proxy(proxy: list[str], command: list[str]) -> list[str]:
    """The wrapper's lines that run ``command`` only once the egress proxy listens, and kill
    the proxy (its whole session: it has a process per acceptor) after it."""
    tries = int(PROXY_START_S / 0.05)
    failed = (
        f"keel: the egress proxy did not start within {PROXY_START_S:.0f}s, so the command was"
        " not run (Keel keeps the proxy's log as egress.log of this execution)"
    )
    return [
        f'( cd "$d" && exec {shlex.join(proxy)} ) 2> "$d/egress.log" &',
        "egress=$!",
        f'i=0; while [ ! -S "$d/{SOCKET_FILE}" ] && [ $i -lt {tries} ] && kill -0 $egress; do',
        "  sleep 0.05; i=$((i + 1))",
        "done 2>/dev/null",
        f'if [ -S "$d/{SOCKET_FILE}" ]; then',
        *command,
        "else",
        f'  echo {shlex.quote(failed)} > "$d/stderr"; rc={PROXY_FAILED_EXIT}',
        "fi",
        f'kill -KILL -- -$egress 2>/dev/null; wait $egress; rm -f "$d/{SOCKET_FILE}"',
    ]


def refused_hosts(run: CommandRun) -> list[str]:
    """The ``host:port`` the execution's egress proxy refused, in order, each once."""
    return read_refused(run.folder)


def check(run: CommandRun) -> Running | Finished:
    """The execution's state now; enforces its timeout and notices a vanished process."""
    if (finished := read_exit(run)) is not None:
        _release(run)
        return finished
    meta = read_meta(run)
    created, timeout_s = (meta.created_at, meta.timeout_s) if meta else (_mtime(run), 0.0)
    started = _read_float(run.folder / "started_at") or created
    elapsed = time.time() - started
    pid = _read_int(run.folder / "pid")
    if pid is None:
        return settle(run, -1, "lost") if elapsed > LAUNCH_GRACE_S else Running(elapsed)
    if not wrapper_alive(run, pid):
        return settle(run, -1, "lost")
    if elapsed > timeout_s:
        kill_tree(pid)
        return settle(run, -9, "timed_out")
    return Running(elapsed)


def stop(run: CommandRun) -> Finished:
    """End the execution now, whether it runs, is being launched, or was never launched.

    The verdict is published before the pid is read, and the wrapper checks for a verdict
    after publishing its pid: so either this sees the pid and kills the wrapper's processes,
    or the wrapper sees the verdict and runs nothing. Claiming the folder first makes a launch
    that comes later start nothing. If the command had already ended, that result stands.
    """
    run.folder.mkdir(parents=True, exist_ok=True)
    finished = settle(run, -9, "stopped")
    pid = _read_int(run.folder / "pid")
    if finished.outcome == "stopped" and pid is not None and wrapper_alive(run, pid):
        kill_tree(pid)
    _release(run)
    return finished


def settle(run: CommandRun, exit_code: int, outcome: Outcome) -> Finished:
    """Publish Keel's own verdict unless the wrapper published the real exit first."""
    tmp = run.folder / f"exit.keel.{os.getpid()}"
    tmp.write_text(f"{exit_code} {outcome} {time.time()}\n")
    try:
        os.link(tmp, run.folder / "exit")
    except FileExistsError:
        pass
    finally:
        tmp.unlink(missing_ok=True)
    finished = read_exit(run)
    assert finished is not None
    return finished


def read_exit(run: CommandRun) -> Finished | None:
    try:
        fields = (run.folder / "exit").read_text().split()
    except FileNotFoundError:
        return None
    outcome: Outcome = next((o for o in _KEEL_VERDICTS if fields[1:2] == [o]), "exited")
    # Keel's verdicts carry the moment they were given; the wrapper records its own.
    given_at = float(fields[2]) if len(fields) > 2 else None
    started = _read_float(run.folder / "started_at")
    ended = _read_float(run.folder / "finished_at") or given_at or time.time()
    duration = round(ended - started, 3) if started else 0.0
    return Finished(exit_code=int(fields[0]), outcome=outcome, duration_s=duration)


def kill_tree(pid: int) -> None:
    """SIGKILL the wrapper's process group and every process below it.

    The group holds the command, bubblewrap and the sandbox (bubblewrap runs without
    ``--new-session``); the walk also reaches what left the group (``setsid`` in a command,
    a sandbox in its own session, the egress proxy), as long as it has not been orphaned yet.
    ``kill_below`` freezes all of it before anything dies, because a killed parent's children
    are reparented out of the tree.
    """
    kill_below(pid, group=True)


def wrapper_alive(run: CommandRun, pid: int) -> bool:
    """Is ``pid`` still this execution's wrapper? Guards against a pid reused after reboot."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    return str(run.folder / "run.sh").encode() in cmdline


SECRET_MIN_LEN = 4  # shorter values would mask ordinary text


def mask(text: str, secrets: Iterable[str]) -> str:
    """``text`` with each secret value replaced by ``***``, the longest first (one secret
    may contain another)."""
    for value in sorted((v for v in secrets if len(v) >= SECRET_MIN_LEN), key=len, reverse=True):
        text = text.replace(value, "***")
    return text


def mask_logs(run: CommandRun, secrets: Iterable[str]) -> None:
    """Replace each secret's value in the execution's stored output, once it has ended (the
    command printed what it printed; Keel keeps no copy of a secret)."""
    values = sorted({v.encode() for v in secrets if len(v) >= SECRET_MIN_LEN}, key=len)[::-1]
    if not values:
        return
    for stream in ("stdout", "stderr"):
        path = run.log_path(stream)
        try:
            _mask_file(path, values)
        except FileNotFoundError:
            continue


def _mask_file(path: Path, values: list[bytes]) -> None:
    keep = max(len(v) for v in values) - 1
    tmp = path.with_name(f"{path.name}.masking")
    changed = False
    with path.open("rb") as source, tmp.open("wb") as target:
        pending = b""
        while chunk := source.read(1 << 20):
            window = pending + chunk
            for value in values:
                if value in window:
                    window, changed = window.replace(value, b"***"), True
            pending = window[-keep:] if keep else b""
            target.write(window[: len(window) - len(pending)])
        target.write(pending)
    if changed:
        os.replace(tmp, path)
    else:
        tmp.unlink()


def read_bounded(path: Path, limit: int = 4096) -> str:
    """The whole file if small, else its first and last ``limit`` bytes around a gap note."""
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size <= 2 * limit:
                return f.read().decode("utf-8", "replace")
            head = f.read(limit)
            f.seek(size - limit)
            tail = f.read()
    except FileNotFoundError:
        return ""
    gap = f"\n[... {size - 2 * limit} bytes omitted ...]\n"
    return head.decode("utf-8", "replace") + gap + tail.decode("utf-8", "replace")


def _write_atomic(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def _mtime(run: CommandRun) -> float:
    try:
        return run.folder.stat().st_mtime
    except OSError:
        return time.time()


def _read_float(path: Path) -> float | None:
    try:
        return float(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None
