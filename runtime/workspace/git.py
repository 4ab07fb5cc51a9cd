"""Git invocations for workspaces and devbox tools: argv, environment, token handling.

A token for an HTTPS remote reaches git through a credential helper: the helper is configured
with git's ``GIT_CONFIG_*`` environment (the equivalent of ``-c credential.helper=...``, but
out of the argv) and prints the token from the child's environment when git asks for it. The
token is never part of any argv (visible in ``ps``: the helper's own command line names only
the variable), the remote URL, ``.git/config``, a metadata file or a log line, and any text
git prints back is redacted before it leaves this module. Git asks the helper only for the
remote it is talking to, and only once the remote demanded credentials.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from runtime.errors import ConfigError
from runtime.workspace.process import ProcessResult, run_process

# Repository content is untrusted: hooks and fsmonitor would run its code outside the sandbox.
HARDENING: tuple[str, ...] = (
    "-c",
    "core.hooksPath=/dev/null",
    "-c",
    "core.fsmonitor=false",
    "-c",
    "protocol.ext.allow=never",
)
IDENTITY: tuple[str, ...] = ("-c", "user.name=Keel", "-c", "user.email=keel@localhost")
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
# Answers git's "get" with the token from the environment; ignores "store" and "erase".
# printf is a shell builtin, so the token is in no process's argv either.
CREDENTIAL_HELPER = (
    "!f() { test \"$1\" = get && "
    f"printf 'username=x-access-token\\npassword=%s\\n' \"${TOKEN_VARIABLE}\"; }}; f"
)


def auth_env(token: str) -> dict[str, str]:
    """Git config entries given through the environment, as ``-c`` would, but out of argv:
    the empty helper first clears any helper the user configured, then ours answers."""
    return {
        TOKEN_VARIABLE: token,
        "GIT_CONFIG_COUNT": "2",
        "GIT_CONFIG_KEY_0": "credential.helper",
        "GIT_CONFIG_VALUE_0": "",
        "GIT_CONFIG_KEY_1": "credential.helper",
        "GIT_CONFIG_VALUE_1": CREDENTIAL_HELPER,
    }


def git_command(args: Sequence[str], *, token: str | None = None) -> GitCommand:
    env = {key: os.environ[key] for key in _PASSTHROUGH if key in os.environ}
    env |= {"LANG": "C", "LC_ALL": "C", "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "true"}
    if token:
        env |= auth_env(token)
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
    stdin: bytes | None = None,
    timeout_s: float = 300.0,
) -> ProcessResult:
    """Run one git command; its output comes back with any token redacted."""
    command = git_command(args, token=token)
    result = await run_process(
        command.argv, cwd=cwd, env=command.env, stdin=stdin, timeout_s=timeout_s
    )
    return ProcessResult(
        argv=tuple(args),
        returncode=result.returncode,
        stdout=redact(result.stdout, token),
        stderr=redact(result.stderr, token),
    )
