"""Keel's own git in a workspace is held to the limits a command is: the repository's filters
run there, so they get the same resource limits and hidden files, and nothing they print or
pack can take Keel's memory (found by a red-team review of #37).
"""

from __future__ import annotations

import base64
import hashlib
import os
import resource
import shlex
import struct
import threading
import time
import uuid
import zlib
from pathlib import Path

import pytest

from runtime.tools.devbox import GitCommit, RunCommand, WriteFile
from runtime.workspace import Workspaces, WorkspaceSpec
from runtime.workspace.commands import execution_id
from tests.security.kit import (
    CANARY,
    assert_clean,
    context,
    make_origin,
    new_workspace,
    plant_filter,
    run,
    settle,
    streams,
)


async def _commit_with_filter(ws: Path, workspaces: Workspaces, filter_sh: str) -> str:
    """Plant a clean filter (the program ``filter_sh``) with a sandboxed command, change a
    file, and let Keel's git_commit run it (inside Keel's *confined* sandbox); the output of
    git_commit."""
    await plant_filter(workspaces.sandbox, ws, "rt", filter_sh)
    await settle(WriteFile(), {"path": "x.txt", "content": "x\n"}, context(ws))
    committed = await settle(GitCommit(), {"message": "m"}, context(ws))
    return committed.output


# -- 1. Keel's own sandboxed git runs with none of the configured resource limits -------------


async def test_keels_sandboxed_git_gets_the_resource_limits_of_a_command(tmp_path: Path) -> None:
    """run_command gets ulimit -t/-v/-f; the git Keel runs in the workspace (git_commit,
    git_push's import, apply_patch, status...) runs repository-chosen programs (filters) in
    ``confined()``, which sets none: CPU, memory and file size are unlimited there."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    limits = "ulimit -t > /tmp/lim-t; ulimit -v > /tmp/lim-v; ulimit -f > /tmp/lim-f; cat\n"
    await _commit_with_filter(ws, workspaces, limits)
    seen = await run(workspaces.sandbox, ws, "cat /tmp/lim-t /tmp/lim-v /tmp/lim-f")
    values = streams(seen.output)[0].split()
    assert len(values) == 3, seen.output
    assert "unlimited" not in values, f"Keel's sandboxed git runs unlimited: t/v/f = {values}"


# -- 2. Keel buffers everything its sandboxed git prints, in its own memory ------------------


async def test_keel_does_not_buffer_unbounded_output_of_its_sandboxed_git(tmp_path: Path) -> None:
    """A clean filter (running under git add in git_commit) writes 400 MB to stderr, which is
    the pipe Keel reads with ``communicate()``: Keel's own process (holding every secret and
    every other task) grows by that much. 400 MB here; 900 s of ``yes >&2`` is unbounded."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB
    spew = "head -c 400000000 /dev/zero | tr '\\0' A >&2; cat\n"
    output = await _commit_with_filter(ws, workspaces, spew)
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024
    assert grown_mib < 128, f"Keel's own process grew by {grown_mib} MiB ({output[:80]!r})"


# -- 4. As root, the sandbox's uid 0 owns every root-only file it is shown ------------------


async def test_root_only_files_in_shown_folders_unreadable(tmp_path: Path) -> None:
    """With Keel as root the sandbox maps uid 0 -> 0 (owner of every host file), so a 0600
    root-owned file in /etc, /usr or a toolchain folder is readable (CapEff 0 does not
    matter: the owner bits apply). /etc is shown minus a short deny list, so e.g. an
    EnvironmentFile /etc/default/keel, a systemd drop-in with Environment=, /etc/environment,
    a WireGuard key... leaks."""
    if os.geteuid() != 0:
        pytest.skip("only as root")
    secret_file = Path(f"/etc/keel-redteam-{uuid.uuid4().hex[:8]}.env")
    secret_file.write_text(f"SLACK_BOT_TOKEN={CANARY}\n")
    secret_file.chmod(0o600)
    try:
        origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
        workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
        seen = await run(workspaces.sandbox, ws, f"cat {secret_file}")
    finally:
        secret_file.unlink()
    assert_clean([seen.output], where="a command's output (root-only /etc file)")


# -- 5. Keel's configuration/database are masked for commands, not for Keel's own git -------


async def test_keel_files_hidden_from_keels_own_sandboxed_git_too(tmp_path: Path) -> None:
    """``Sandbox.hidden`` (Keel's config file and SQLite database, even inside a shown path)
    is masked by ``_bwrap`` for run_command, but ``confined()`` (the git Keel runs in the
    workspace, which runs the repository's filters) masks only ETC_SECRETS. A config at
    /usr/local/etc/keel/app.yaml (or /etc/keel.yaml, a DB under /usr/local/var) is hidden from
    run_command and readable by a clean filter during git_commit."""
    folder = Path(f"/usr/local/etc/keel-redteam-{uuid.uuid4().hex[:8]}")
    folder.mkdir(parents=True)
    config = folder / "app.yaml"
    config.write_text(f"slack:\n  bot_token: {CANARY}\n")
    try:
        origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
        root = tmp_path / "ws"
        workspaces = Workspaces(root, "bwrap", hidden=[config])
        ws = await workspaces.ensure(WorkspaceSpec("root-1", str(origin)))
        direct = await run(workspaces.sandbox, ws, f"cat {config}")
        assert_clean([direct.output], where="run_command (masked, as designed)")
        await _commit_with_filter(ws, workspaces, f"cat {config} > /tmp/stolen 2>&1; cat\n")
        stolen = await run(workspaces.sandbox, ws, "cat /tmp/stolen")
    finally:
        config.unlink()
        folder.rmdir()
    assert_clean([stolen.output], where="what a filter under git_commit read")


# -- 8. A 16 KB pack makes Keel's trusted index-pack allocate gigabytes ----------------------


def _delta_bomb(copies: int) -> bytes:
    """A valid pack: a 16 MiB blob of zeros and a delta on it whose result claims (and is)
    ``copies`` x 16 MiB. Compressed, the whole pack is ~16 KB whatever ``copies`` is."""

    def obj_header(kind: int, size: int) -> bytes:
        byte, size, out = (kind << 4) | (size & 0x0F), size >> 4, bytearray()
        while size:
            out.append(byte | 0x80)
            byte, size = size & 0x7F, size >> 7
        out.append(byte)
        return bytes(out)

    def varint(n: int) -> bytes:
        out = bytearray()
        while True:
            c, n = n & 0x7F, n >> 7
            out.append(c | 0x80 if n else c)
            if not n:
                return bytes(out)

    def ofs(n: int) -> bytes:
        out = [n & 0x7F]
        n >>= 7
        while n:
            n -= 1
            out.insert(0, 0x80 | (n & 0x7F))
            n >>= 7
        return bytes(out)

    base = b"\0" * 0xFFFFFF
    delta = varint(len(base)) + varint(copies * 0xFFFFFF)
    delta += bytes([0xF0, 0xFF, 0xFF, 0xFF]) * copies  # copy 0xFFFFFF bytes from offset 0
    body = b"PACK" + struct.pack(">II", 2, 2)
    at_base = len(body)
    body += obj_header(3, len(base)) + zlib.compress(base, 9)
    at_delta = len(body)
    body += obj_header(6, len(delta)) + ofs(at_delta - at_base) + zlib.compress(delta, 9)
    return body + hashlib.sha1(body).digest()


class _PeakRss:
    """The largest VmHWM of any host process whose argv mentions ``needle``."""

    def __init__(self, needle: bytes) -> None:
        self.needle, self.peak_kib, self._stop = needle, 0, threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def _watch(self) -> None:
        while not self._stop.is_set():
            for entry in os.listdir("/proc"):
                if not entry.isdigit():
                    continue
                try:
                    if self.needle not in Path(f"/proc/{entry}/cmdline").read_bytes():
                        continue
                    for line in Path(f"/proc/{entry}/status").read_text().splitlines():
                        if line.startswith("VmHWM:"):
                            self.peak_kib = max(self.peak_kib, int(line.split()[1]))
                except OSError:
                    continue
            time.sleep(0.02)

    def __enter__(self) -> _PeakRss:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)


async def test_pack_from_the_sandbox_cannot_make_keels_index_pack_allocate_gigabytes(
    tmp_path: Path,
) -> None:
    """The sandbox controls every byte of the pack stream (here a clean filter under git add
    writes into the script's stdout through /proc/$PPID/fd/1, then kills the rest).
    ``--max-input-size`` bounds the compressed input only: Keel's ``index-pack`` in the
    mirror runs on the host with no rlimit and inflates a delta to the size its header
    claims. 16 KB in -> ~800 MiB RSS here; copies=1000 asks for 16 GiB, several such deltas
    are resolved in parallel threads."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))

    pack = base64.b64encode(_delta_bomb(200)).decode()  # a 3.2 GB object from 16 KB
    drop = f"mkdir -p .attack && echo {pack} | base64 -d > .attack/b.pack && echo ok"
    assert "ok" in (await run(workspaces.sandbox, ws, drop)).output
    bomb = (  # the pipe to Keel is the stdout of "git add --all" (and of the script)
        "for p in /proc/[0-9]*; do case \"$(tr '\\0' ' ' < $p/cmdline)\" in "
        f"'git add --all'*) cat {ws}/.attack/b.pack > $p/fd/1;; esac; done; kill -9 -1; cat\n"
    )
    with _PeakRss(b"index-pack") as watch:
        await _commit_with_filter(ws, workspaces, bomb)
    peak_mib = watch.peak_kib // 1024
    assert 0 < peak_mib < 1100, f"Keel's index-pack peaked at {peak_mib} MiB (limit 1 GiB)"


async def test_command_cannot_start_unbounded_processes(tmp_path: Path) -> None:
    """A fork bomb in one sandbox must not take the host's pid space: 1500 sleepers are
    started (gently: no bomb), and no more than the run's cap are alive at once."""
    from runtime.workspace import cgroups

    if not cgroups.available():
        pytest.skip("no writable pids cgroup on this host: process counts are not capped")
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    forks = (
        "import os, time\n"
        "n = 0\n"
        "while n < 1500:\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(30)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print('live=%d' % len([p for p in os.listdir('/proc') if p.isdigit()]))\n"
    )
    # The sandbox's PID namespace ends with the command: every sleeper dies with it.
    command = {"command": f"python3 -S -c {shlex.quote(forks)}", "timeout_s": 60}
    seen = await settle(RunCommand(workspaces.sandbox), command, context(ws, "call-forks"))
    out = streams(seen.output)[0]
    live = int(out.split("live=")[1].split()[0])
    assert live <= cgroups.PIDS_MAX, f"one command held {live} processes at once"
    assert live > 100  # the probe did start processes: the cap, not a failure, stopped it
    group = cgroups.existing_group(f"exec-{execution_id('task-1', 'call-forks')}")
    assert group is not None
    for _ in range(50):  # its last processes are reaped just after the command ends
        cgroups.sweep()
        if not group.exists():
            break
        time.sleep(0.1)
    assert not group.exists(), "the run's process-count group was left behind"
