"""Git invocations for workspaces and devbox tools: argv, environment, token handling.

Two kinds of git run here, and they never meet:

- ``workspace_git`` reads and writes a workspace (add, commit, status, apply, rev-parse):
  every byte there, ``.git`` included, may have been written by a sandboxed command or
  shipped by the repository, so it runs inside the sandbox too, with no network and nothing
  but the system directories, the workspace and its ``/tmp``. Whatever its configuration makes
  git run (filters, fsmonitor, hooks, gpg, pagers, ``include.path`` ...) runs in there.
- ``git`` is Keel's trusted git, for Keel's own repositories (the clone, the workspace's
  ``mirror.git``) and remotes. It never reads a workspace: it starts with no system or global
  configuration (``GIT_CONFIG_NOSYSTEM``, ``GIT_CONFIG_GLOBAL=/dev/null``), no system
  attributes, redirects off, and pushes to the URL Keel recorded, not to a remote's name.

A token for an HTTPS remote reaches git through a credential helper: the helper is configured
with git's ``GIT_CONFIG_*`` environment (the equivalent of ``-c credential.helper=...``, but
out of the argv) and prints the token from the child's environment when git asks for it. The
token is never part of any argv (visible in ``ps``: the helper's own command line names only
the variable), the remote URL, ``.git/config``, a metadata file or a log line, and any text
git prints back is redacted before it leaves this module. The helper answers only for the
protocol and host Keel meant (``KEEL_GIT_ORIGIN``), and only once that remote demanded
credentials; redirects are not followed, so a token never travels to another host.
"""

from __future__ import annotations

import base64
import contextlib
import os
import re
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from runtime.errors import ConfigError
from runtime.workspace import cgroups
from runtime.workspace.paths import PathRefused, read_inside
from runtime.workspace.process import ProcessResult, run_process
from runtime.workspace.sandbox import (
    Isolation,
    Sandbox,
    SandboxMode,
    absolute_path,
    confined,
)
from runtime.workspace.state import WorkspaceState

# Belt and braces for Keel's trusted git, whose only configuration is Keel's own: no hooks,
# no fsmonitor, no ext:: transport, no redirects carrying a token elsewhere.
HARDENING: tuple[str, ...] = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "protocol.ext.allow=never",
    "-c",
    "http.followRedirects=false",
)
ISOLATED_CONFIG = {
    "GIT_CONFIG_NOSYSTEM": "1",
    "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_ASKPASS": "true",
    "SSH_ASKPASS": "true",
    "LANG": "C",
    "LC_ALL": "C",
}
_PASSTHROUGH = (
    "PATH",
    "HOME",
    "HTTPS_PROXY",
    "HTTP_PROXY",
    "NO_PROXY",
    "https_proxy",
    "http_proxy",
    "no_proxy",
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "GIT_SSL_CAINFO",
)
REDACTED = "***"


@dataclass(frozen=True, slots=True)
class GitCommand:
    argv: tuple[str, ...]
    env: Mapping[str, str]


def check_repo_url(repo_url: str) -> None:
    """Refuse URLs that carry credentials: a token belongs in ``token=``, not in the URL."""
    parts = urlsplit(repo_url)
    if parts.scheme in ("http", "https", "ssh", "git") and (parts.username or parts.password):
        raise ConfigError("repo_url must not embed credentials; pass the token separately")


def uses_https(repo_url: str) -> bool:
    """True where a token may be sent: HTTPS, or plain HTTP to this machine's loopback."""
    parts = urlsplit(repo_url)
    if parts.scheme == "https":
        return True
    return parts.scheme == "http" and parts.hostname in _LOOPBACK


_LOOPBACK = frozenset({"127.0.0.1", "localhost", "::1"})
TOKEN_VARIABLE = "KEEL_GIT_TOKEN"
ORIGIN_VARIABLE = "KEEL_GIT_ORIGIN"
# Answers git's "get" with the token from the environment, only when git asks about the
# protocol and host Keel meant; ignores "store" and "erase". read, case and printf are shell
# builtins, so the token is in no process's argv either.
CREDENTIAL_HELPER = (
    "!f() { test \"$1\" = get || return 0; p=; h=; "
    "while IFS= read -r l; do case \"$l\" in protocol=*) p=${l#protocol=};; "
    "host=*) h=${l#host=};; esac; done; "
    f"test \"$p://$h\" = \"${ORIGIN_VARIABLE}\" && "
    f"printf 'username=x-access-token\\npassword=%s\\n' \"${TOKEN_VARIABLE}\"; }}; f"
)


def credential_origin(url: str) -> str:
    """``scheme://host[:port]`` as git names it to a credential helper."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}"


def auth_env(token: str, url: str) -> dict[str, str]:
    """Git config entries given through the environment, as ``-c`` would, but out of argv:
    the empty helper first clears any helper configured anywhere, then ours answers, for
    ``url``'s host only."""
    return {
        TOKEN_VARIABLE: token,
        ORIGIN_VARIABLE: credential_origin(url),
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "credential.helper",
        "GIT_CONFIG_VALUE_0": "",
        "GIT_CONFIG_KEY_1": "credential.helper",
        "GIT_CONFIG_VALUE_1": CREDENTIAL_HELPER,
    }


def git_command(
    args: Sequence[str], *, token: str | None = None, url: str | None = None
) -> GitCommand:
    """Keel's trusted git: ``token`` is offered only to ``url``'s host."""
    env = {key: os.environ[key] for key in _PASSTHROUGH if key in os.environ}
    env |= ISOLATED_CONFIG | {"PATH": absolute_path()}
    if token:
        if url is None:
            raise ValueError("a token goes with the URL it is for")
        env |= auth_env(token, url)
    return GitCommand(argv=("git", *HARDENING, *args), env=env)


def redact(text: str, token: str | None) -> str:
    if not token:
        return text
    basic = base64.b64encode(f"x-access-token:{token}".encode()).decode()
    for secret in (token, basic):
        text = text.replace(secret, REDACTED)
    return text


async def git(
    args: Sequence[str],
    *,
    cwd: Path | None = None,
    token: str | None = None,
    url: str | None = None,
    stdin: bytes | None = None,
    timeout_s: float = 300.0,
) -> ProcessResult:
    """Run one trusted git command (never in a workspace: see ``workspace_git``); its output
    comes back with any token redacted."""
    command = git_command(args, token=token, url=url)
    result = await run_process(
        command.argv, cwd=cwd, env=command.env, stdin=stdin, timeout_s=timeout_s
    )
    return ProcessResult(
        argv=tuple(args),
        returncode=result.returncode,
        stdout=redact(result.stdout, token),
        stderr=redact(result.stderr, token),
    )


# -- git in a workspace: always inside the sandbox -------------------------------------------

_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
WORKSPACE_PATH = "/usr/local/bin:/usr/bin:/bin"
# Given through the environment, which outranks every configuration file git reads: the
# workspace's hooks and fsmonitor would only run inside the sandbox anyway, but they must
# not change what Keel's own commands do there either.
_WORKSPACE_CONFIG = {
    "GIT_CONFIG_COUNT": "5",
    "GIT_CONFIG_KEY_0": "core.hooksPath",
    "GIT_CONFIG_VALUE_0": "/dev/null",
    "GIT_CONFIG_KEY_1": "core.fsmonitor",
    "GIT_CONFIG_VALUE_1": "false",
    "GIT_CONFIG_KEY_2": "commit.gpgSign",
    "GIT_CONFIG_VALUE_2": "false",
    # No housekeeping after a commit (a `git maintenance run --auto` process each time).
    "GIT_CONFIG_KEY_3": "gc.auto",
    "GIT_CONFIG_VALUE_3": "0",
    "GIT_CONFIG_KEY_4": "maintenance.auto",
    "GIT_CONFIG_VALUE_4": "false",
    "GIT_AUTHOR_NAME": "Keel",
    "GIT_AUTHOR_EMAIL": "keel@localhost",
    "GIT_COMMITTER_NAME": "Keel",
    "GIT_COMMITTER_EMAIL": "keel@localhost",
}


def is_sha(text: str) -> bool:
    return bool(_SHA.fullmatch(text))


async def workspace_isolation(ws: Path) -> Isolation:
    """The isolation the workspace was made with (Keel's record of it), refusing as the
    sandbox refuses: without bubblewrap only an explicit ``none`` runs anything."""
    record = WorkspaceState(ws).read_record() or {}
    mode = record.get("sandbox", "auto")
    checked: SandboxMode = mode if mode in ("auto", "bwrap", "none") else "auto"
    return await Sandbox(mode=checked).isolation()


def _recorded_hidden(ws: Path) -> list[Path]:
    """Keel's files (configuration, database) that the workspace's sandboxes must not see,
    as Workspaces recorded them."""
    hidden = (WorkspaceState(ws).read_record() or {}).get("hidden", [])
    return [Path(h) for h in hidden if isinstance(h, str) and h.startswith("/")]


async def workspace_command(
    ws: Path, argv: Sequence[str], group: Path | None = None
) -> tuple[list[str], dict[str, str]]:
    """``argv`` as it runs in the workspace's sandbox (inside the process-count ``group``
    when there is one), and the environment to start it with."""
    isolation = await workspace_isolation(ws)
    env = ISOLATED_CONFIG | _WORKSPACE_CONFIG | {
        "PATH": WORKSPACE_PATH,
        "GIT_CEILING_DIRECTORIES": str(ws.absolute().parent),
    }
    if isolation == "none":
        home = WorkspaceState(ws).ensure().home
        return list(argv), env | {"HOME": str(home)}
    wrapped = confined(argv, ws, env | {"HOME": "/tmp"}, hidden=_recorded_hidden(ws), group=group)
    return wrapped, {"PATH": absolute_path()}


@contextlib.contextmanager
def _run_group() -> Iterator[Path | None]:
    group = cgroups.make_group(f"git-{uuid.uuid4().hex}")
    try:
        yield group
    finally:
        cgroups.remove_group(group)


async def workspace_run(
    ws: Path, argv: Sequence[str], *, stdin: bytes | None = None, timeout_s: float = 300.0
) -> ProcessResult:
    """Run ``argv`` (git, or a short script of git commands) in the workspace, sandboxed."""
    with _run_group() as group:
        command, env = await workspace_command(ws, argv, group)
        result = await run_process(command, cwd=ws, env=env, stdin=stdin, timeout_s=timeout_s)
    return ProcessResult(tuple(argv), result.returncode, result.stdout, result.stderr)


async def workspace_git(
    ws: Path, args: Sequence[str], *, stdin: bytes | None = None, timeout_s: float = 300.0
) -> ProcessResult:
    """``git args`` in the workspace, inside the sandbox; the result names ``args`` only."""
    result = await workspace_run(ws, ["git", *args], stdin=stdin, timeout_s=timeout_s)
    return ProcessResult(tuple(args), result.returncode, result.stdout, result.stderr)


_REF = re.compile(r"refs/heads/[A-Za-z0-9._/+,=@-]{1,200}")


def head_named_by_files(ws: Path) -> str | None:
    """The sha the workspace's ``.git/HEAD`` names, read as plain data (no-follow opens, no
    git): a hint only, used as-is when the mirror already holds that commit, so that a push
    right after git_commit needs no second sandbox. Anything unusual (a ``.git`` file, an
    odd ref, a symbolic ref chain) gives None, and the caller asks the sandboxed git."""
    try:
        head = read_inside(ws, ".git/HEAD", 512)[0].decode("ascii").strip()
        if is_sha(head):
            return head
        ref = head.removeprefix("ref: ")
        if ref == head or not _REF.fullmatch(ref) or ".." in ref or "/." in ref:
            return None
        try:
            loose = read_inside(ws, f".git/{ref}", 128)[0].decode("ascii").strip()
            return loose if is_sha(loose) else None
        except FileNotFoundError:
            packed = read_inside(ws, ".git/packed-refs", 8 * 2**20)[0].decode("utf-8", "replace")
    except (OSError, PathRefused, UnicodeDecodeError):
        return None
    for line in packed.splitlines():
        sha, _, name = line.partition(" ")
        if name == ref and is_sha(sha):
            return sha
    return None
