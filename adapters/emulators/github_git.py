"""The GitHub emulator's git remote: smart HTTP (``git http-backend``) that requires a token.

``{url}/{owner}/{repo}.git`` is the repository's ``clone_url``, as on GitHub. Every request
must carry HTTP Basic credentials whose password is a token the emulator issued (a personal
access token, or an installation token of the installation the repository belongs to);
anything else is answered 401 with a ``WWW-Authenticate`` challenge, which is what makes git
ask its credential helper. The repositories are real bare repositories under
``GitHubState.git_root``, served by git's own CGI program, so clones and pushes are real.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import os
import subprocess
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

from starlette.requests import Request
from starlette.responses import Response

if TYPE_CHECKING:
    from adapters.emulators.github_state import GitHubState

GIT_ROUTE = "/{owner}/{repo}.git/{rest:path}"
_CHALLENGE = {"WWW-Authenticate": 'Basic realm="GitHub"'}


def _password(request: Request) -> str | None:
    scheme, _, encoded = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(encoded, validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        return None
    return decoded.partition(":")[2] or None


def _allowed(state: GitHubState, full_name: str, password: str | None) -> bool:
    issued = state.tokens.get(password or "")
    if issued is None or not issued.valid(time.time()):
        return False
    return state.token_reaches(issued, full_name)


async def git_smart_http(request: Request) -> Response:
    """One smart-HTTP request (``info/refs``, ``git-upload-pack``, ``git-receive-pack``)."""
    state: GitHubState = request.app.state.github
    owner, name = request.path_params["owner"], request.path_params["repo"]
    full_name = f"{owner}/{name}"
    repo = state.repos.get(full_name)
    if repo is None or repo.git_dir is None or state.git_root is None:
        return Response("Repository not found.\n", status_code=404)
    if not _allowed(state, full_name, _password(request)):
        state.git_refusals += 1
        return Response("Invalid username or token.\n", status_code=401, headers=_CHALLENGE)
    body = await request.body()
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "GIT_PROJECT_ROOT": str(state.git_root),
        "GIT_HTTP_EXPORT_ALL": "1",
        "PATH_INFO": f"/{full_name}.git/{request.path_params['rest']}",
        "REQUEST_METHOD": request.method,
        "QUERY_STRING": request.url.query,
        "CONTENT_TYPE": request.headers.get("content-type", ""),
        "CONTENT_LENGTH": str(len(body)),
        "REMOTE_USER": "x-access-token",  # an authenticated user may push (receive-pack)
        "REMOTE_ADDR": request.client.host if request.client else "127.0.0.1",
        "GIT_CONFIG_NOSYSTEM": "1",
        "HOME": str(state.git_root),
    }
    if encoding := request.headers.get("content-encoding"):
        env["HTTP_CONTENT_ENCODING"] = encoding
    if protocol := request.headers.get("git-protocol"):
        env["GIT_PROTOCOL"] = protocol
    process = await asyncio.create_subprocess_exec(
        "git",
        "http-backend",
        env=env,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await process.communicate(body)
    return _cgi_response(out)


def _cgi_response(output: bytes) -> Response:
    head, _, body = output.partition(b"\r\n\r\n")
    if not _:
        head, _, body = output.partition(b"\n\n")
    status, headers = 200, {}
    for line in head.decode("latin-1").splitlines():
        key, _, value = line.partition(":")
        if key.lower() == "status":
            status = int(value.strip().split()[0])
        elif key:
            headers[key.strip()] = value.strip()
    return Response(body, status_code=status, headers=headers)


def init_bare_repository(
    root: Path,
    full_name: str,
    files: dict[str, str],
    branch: str,
    message: str = "initial commit",
) -> Path:
    """A bare repository at ``root/owner/name.git`` with one commit of ``files`` on ``branch``."""
    bare = root / f"{full_name}.git"
    bare.parent.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(root),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "Seed",
        "GIT_AUTHOR_EMAIL": "seed@example.com",
        "GIT_COMMITTER_NAME": "Seed",
        "GIT_COMMITTER_EMAIL": "seed@example.com",
    }

    def run(*args: str, cwd: Path) -> None:
        subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)

    run("init", "--quiet", "--bare", f"--initial-branch={branch}", str(bare), cwd=root)
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        work = Path(scratch)
        run("init", "--quiet", f"--initial-branch={branch}", cwd=work)
        for name, text in (files or {"README.md": f"# {full_name}\n"}).items():
            (work / name).parent.mkdir(parents=True, exist_ok=True)
            (work / name).write_text(text)
        run("add", "--all", cwd=work)
        run("commit", "--quiet", "-m", message, cwd=work)
        run("push", "--quiet", str(bare), f"HEAD:refs/heads/{branch}", cwd=work)
    return bare


def branch_of(bare: Path, branch: str) -> str | None:
    """The sha ``branch`` points at in ``bare``, or None."""
    found = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"refs/heads/{branch}"],
        cwd=bare,
        capture_output=True,
        text=True,
    )
    return found.stdout.strip() or None
