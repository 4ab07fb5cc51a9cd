"""Moving a workspace's commits into Keel's mirror, the only repository Keel pushes from.

The workspace's git packs the commit inside the sandbox and writes the pack to a pipe; on the
other end the mirror's ``index-pack`` checks every object of it as it would a fetch's. No git
of Keel's reads the workspace's repository or its configuration, and what the sandbox says
(the sha it committed, its branch) is a claim: a sha it named but did not send is not in the
mirror, and a push of it fails there.

A sandbox takes a few milliseconds to start, as long as the commit it runs. So once a
workspace has sent a commit, the next sandbox for it is started straight away and waits,
blocked on its stdin, for the script of the next send (a *sender*): the start-up is paid
while the agent thinks, not while it waits. A sender serves one send and ends; it is a fresh
sandbox like any other, built from Keel's record of the workspace, and it is thrown away
unused if that record, the workspace's folder or its ``/tmp`` changed since it started, if it
waited longer than ``SENDER_IDLE_S``, or to keep at most ``SENDERS_MAX`` waiting.
"""

from __future__ import annotations

import atexit
import logging
import os
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import KeelError, Permanent
from runtime.workspace import cgroups
from runtime.workspace.git import git, git_command, is_sha, workspace_command
from runtime.workspace.process import ProcessResult, Waiting, run_pipeline
from runtime.workspace.sandbox import etc_version, host_program
from runtime.workspace.state import WorkspaceState

log = logging.getLogger(__name__)

# The tail of every script that hands commits to Keel: says "keel-head <sha> <branch>" on
# stderr, then writes a pack of $sha's commit and everything it needs to stdout, less what
# the commits named as arguments (the mirror has them) bring, where the workspace has them.
_NAME_HEAD = (
    'head=$(git rev-parse "HEAD^{commit}" --abbrev-ref HEAD) || '
    '{ echo "the workspace has no commit at HEAD" >&2; exit 3; }; '
    "sha=${head%%$'\\n'*}; echo \"keel-head $sha ${head#*$'\\n'}\" >&2; "
)
SEND_HEAD = (
    _NAME_HEAD + '{ echo "$sha"; for b in "$@"; do echo "$b"; done | '
    'git cat-file --batch-check="%(objectname) %(objecttype)" | '
    'while read -r b t; do [ "$t" = commit ] && echo "^$b"; done; } '
    "| git pack-objects --revs --stdout -q"
)
# Right after a commit, HEAD usually names a branch whose ref git just wrote as a file: read
# with shell builtins, that saves starting a git. Anything else asks git (_NAME_HEAD).
_NAME_NEW_HEAD = (
    "sha=; branch=HEAD; if IFS= read -r h 2>/dev/null < .git/HEAD; then case $h in "
    "'ref: refs/heads/'*) branch=${h#ref: refs/heads/}; "
    'IFS= read -r sha 2>/dev/null < ".git/refs/heads/$branch";; *) sha=$h;; esac; fi; '
    'if [[ $sha =~ ^[0-9a-f]{40}$ && $branch =~ ^[^[:space:]]+$ ]]; then '
    'echo "keel-head $sha $branch" >&2; else ' + _NAME_HEAD + "fi; "
)
# Commits the index (git add --all first) with the message on stdin, then sends the commit,
# less the objects of the commits named as arguments (which a workspace Keel cloned has, and
# if it lacks one the pack fails and a push sends HEAD again the careful way, SEND_HEAD).
# "nothing to commit" (exit 1) goes to stderr with the rest of git commit's words.
COMMIT_AND_SEND = (
    "{ git add --all && git commit --quiet --no-verify -F - >&2; } || exit $?; "
    + _NAME_NEW_HEAD
    + '{ echo "$sha"; for b in "$@"; do echo "^$b"; done; } | git pack-objects --revs --stdout -q'
)
MAX_PACK_BYTES = 2 * 2**30
INDEX_LIMITS = f"ulimit -v {2**30 // 1024} -t 600"  # 1 GiB, 10 CPU minutes

# What a sender runs in its sandbox: it reads its request from stdin (the script, how many
# arguments, each argument: every one ending in a NUL byte), then runs the script with those
# arguments, the rest of stdin being the script's. Only Keel writes that stdin. ``read`` takes
# a pipe a byte at a time, so nothing of the script's input is read ahead. Exit 97: no request.
_READ_REQUEST = (
    "IFS= read -r -d '' script && IFS= read -r -d '' n && [[ $n =~ ^[0-9]{1,3}$ ]] || exit 97; "
    'set --; for ((i = 0; i < n; i++)); do IFS= read -r -d "" a || exit 97; set -- "$@" "$a"; '
    'done; eval "$script"'
)
_NO_REQUEST = 97
SENDERS_MAX = 8
SENDER_IDLE_S = 300.0


@dataclass(frozen=True, slots=True)
class Sent:
    """What a script that sends HEAD to the mirror did: its own result, and the commit it
    named (empty when it named none) with its branch, and whether the mirror took it."""

    result: ProcessResult
    sha: str
    branch: str
    imported: bool
    refusal: str = ""


@dataclass(frozen=True, slots=True)
class _Sender:
    process: Waiting
    group: Path | None
    built_from: tuple[object, ...] | None
    started: float


_waiting: dict[str, _Sender] = {}  # by workspace folder, oldest first


async def send_to_mirror(
    ws: Path,
    mirror: Path,
    script: str,
    *,
    known: Sequence[str] = (),
    stdin: bytes = b"",
    timeout_s: float = 900.0,
) -> Sent:
    """Run ``script`` (ending in ``SEND_HEAD``'s tail) in the workspace's sandbox and stream
    the pack it writes into Keel's mirror; ``known`` names commits the mirror holds, whose
    objects need not travel again."""
    bases = [sha for sha in known if is_sha(sha)]
    index = git_command(
        [
            "--git-dir",
            str(mirror),
            "index-pack",
            "--stdin",
            "--threads=1",
            f"--max-input-size={MAX_PACK_BYTES}",
        ]
    )
    # The pack is the sandbox's to write: a delta may claim any size. index-pack runs with
    # a bounded address space and CPU time, so a small pack cannot take the host's memory.
    limited = [host_program("bash"), "-c", f'{INDEX_LIMITS} && exec "$@"', "keel-limits"]
    request = b"".join(f"{part}\0".encode() for part in (script, len(bases), *bases)) + stdin
    for fresh in (False, True):
        # A sender started ahead that ended before it read its request (exit 97, nothing
        # said) did nothing: the send is made once more, by a sandbox started now.
        sender = await (_new_sender(ws, None) if fresh else _sender(ws))
        try:
            produced, indexed = await run_pipeline(
                sender.process,
                [*limited, *index.argv],
                second_env=index.env,
                second_cwd=mirror,
                stdin=request,
                timeout_s=timeout_s,
            )
        finally:
            cgroups.remove_group(sender.group)
        if produced.returncode != _NO_REQUEST or produced.stderr.strip():
            break
    await _start_next(ws)
    heads = [line.split() for line in produced.stderr.splitlines() if line.startswith("keel-head ")]
    sha, branch = (heads[-1][1], heads[-1][2][:255]) if heads and len(heads[-1]) == 3 else ("", "")
    if not is_sha(sha):
        sha, branch = "", ""
    refusal = "" if indexed.ok else indexed.stderr.strip()[-500:]
    result = ProcessResult(("bash", "-c", script), produced.returncode, "", produced.stderr)
    return Sent(result, sha, branch or "HEAD", produced.ok and indexed.ok and bool(sha), refusal)


async def import_head(
    ws: Path, mirror: Path, known: Sequence[str] = (), timeout_s: float = 900.0
) -> str:
    """Bring the workspace's HEAD commit into Keel's mirror and return its sha; ``known``
    names commits the mirror has (the clone's), whose objects need not travel again."""
    sent = await send_to_mirror(ws, mirror, SEND_HEAD, known=known, timeout_s=timeout_s)
    if not sent.result.ok or not sent.sha:
        problem = sent.result.stderr.strip()[-500:]
        raise Permanent(f"could not pack the workspace's HEAD: {problem}")
    if not sent.imported:
        raise Permanent(f"the workspace's objects were refused: {sent.refusal}")
    return sent.sha


async def in_mirror(mirror: Path, sha: str) -> bool:
    """The mirror holds commit ``sha`` (so its objects came through index-pack)."""
    if not is_sha(sha):
        return False
    found = await git(["--git-dir", str(mirror), "cat-file", "-e", f"{sha}^{{commit}}"])
    return found.ok


# -- senders: sandboxes started ahead of the send they serve ----------------------------------


def _built_from(ws: Path) -> tuple[object, ...] | None:
    """What a sender for ``ws`` is made from: the workspace's folder and its ``/tmp`` (which
    ones, not their names), Keel's record of how to isolate it and what the host hides in
    ``/etc``. None when the folders are gone."""
    state = WorkspaceState(ws)
    try:
        folder, tmp = os.lstat(ws), os.lstat(state.tmp)
    except OSError:
        return None
    record = state.read_record() or {}
    hidden = record.get("hidden")
    shown = tuple(map(str, hidden)) if isinstance(hidden, list) else ()
    isolation = (record.get("sandbox"), shown, etc_version())
    return (folder.st_dev, folder.st_ino, tmp.st_dev, tmp.st_ino, *isolation)


async def _sender(ws: Path) -> _Sender:
    """The sender started ahead for ``ws`` when it is still good, else a new one."""
    ready = _waiting.pop(str(ws.absolute()), None)
    built_from = _built_from(ws)
    if ready is not None:
        fresh = time.monotonic() - ready.started < SENDER_IDLE_S
        same = built_from is not None and ready.built_from == built_from
        if fresh and same and ready.process.alive:
            return ready
        _retire(ready)
    return await _new_sender(ws, built_from)


async def _new_sender(ws: Path, built_from: tuple[object, ...] | None) -> _Sender:
    group = cgroups.make_group(f"git-{uuid.uuid4().hex}")
    try:
        command, env = await workspace_command(ws, ["bash", "-c", _READ_REQUEST, "keel"], group)
        return _Sender(Waiting(command, cwd=ws, env=env), group, built_from, time.monotonic())
    except BaseException:
        cgroups.remove_group(group)
        raise


async def _start_next(ws: Path) -> None:
    """Start the sender of ``ws``'s next send now (best effort: the send starts one itself).
    Not when the workspace's folders are gone: making a sandbox would make them again."""
    built_from = _built_from(ws)
    if built_from is None:
        return
    try:
        sender = await _new_sender(ws, built_from)
    except (OSError, KeelError) as e:
        log.info("no sender started ahead for %s: %s", ws, e)
        return
    if (replaced := _waiting.pop(str(ws.absolute()), None)) is not None:
        _retire(replaced)
    _waiting[str(ws.absolute())] = sender
    while len(_waiting) > SENDERS_MAX:
        _retire(_waiting.pop(next(iter(_waiting))))


def _retire(sender: _Sender) -> None:
    sender.process.discard()
    cgroups.remove_group(sender.group)  # best effort: a later sweep takes it when it is not


def retire_senders(ws: Path | None = None) -> None:
    """Stop the senders waiting for ``ws`` (for every workspace when None): before its folder
    is removed, and when Keel stops."""
    for key in [k for k in _waiting if ws is None or k == str(ws.absolute())]:
        _retire(_waiting.pop(key))


atexit.register(retire_senders)
