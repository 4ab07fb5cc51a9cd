"""Workspaces on real git repositories: clone, reuse, rebuild, refs, and token hygiene."""

from __future__ import annotations

import base64
import http.server
import json
import logging
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest

from runtime.errors import ConfigError, NotFound, Retryable
from runtime.workspace import Workspaces, WorkspaceSpec
from runtime.workspace.git import git, git_command
from runtime.workspace.state import WorkspaceState

TOKEN = "tok-SECRET-123"


def sh(*argv: str, cwd: Path | None = None) -> str:
    done = subprocess.run(argv, cwd=cwd, check=True, capture_output=True, text=True)
    return done.stdout.strip()


def make_bare_repo(tmp_path: Path) -> Path:
    """A bare repo with ``main`` (one commit) and ``feature`` (one more)."""
    bare, seed = tmp_path / "origin.git", tmp_path / "seed"
    sh("git", "init", "-q", "--bare", "-b", "main", str(bare))
    sh("git", "clone", "-q", str(bare), str(seed))
    commit = ("git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm")
    (seed / "README.md").write_text("hello\n")
    sh("git", "add", ".", cwd=seed)
    sh(*commit, "init", cwd=seed)
    sh("git", "push", "-q", "origin", "main", cwd=seed)
    sh("git", "checkout", "-q", "-b", "feature", cwd=seed)
    (seed / "feature.txt").write_text("feature\n")
    sh("git", "add", ".", cwd=seed)
    sh(*commit, "feature", cwd=seed)
    sh("git", "push", "-q", "origin", "feature", cwd=seed)
    return bare


@pytest.fixture
def bare(tmp_path: Path) -> Path:
    return make_bare_repo(tmp_path)


@pytest.fixture
def workspaces(tmp_path: Path) -> Workspaces:
    return Workspaces(tmp_path / "workspaces", sandbox="none")


async def test_clone_at_default_branch_when_workspace_missing(
    bare: Path, workspaces: Workspaces
) -> None:
    ws = await workspaces.ensure(WorkspaceSpec("root-1", str(bare)))
    assert ws == (workspaces.root / "root-1").absolute()
    assert sh("git", "rev-parse", "HEAD", cwd=ws) == sh("git", "rev-parse", "main", cwd=bare)
    meta = json.loads(WorkspaceState(ws).record_path.read_text())
    assert meta["repo_url"] == str(bare) and meta["root_task_id"] == "root-1"
    assert meta["push_url"] == str(bare) and meta["default_branch"] == "main"
    assert sh("git", "status", "--porcelain", "--ignored", cwd=ws) == ""  # Keel left nothing
    assert not (ws / ".keel").exists()


async def test_checkout_of_ref_when_ref_given(bare: Path, workspaces: Workspaces) -> None:
    ws = await workspaces.ensure(WorkspaceSpec("root-1", f"file://{bare}", ref="feature"))
    assert sh("git", "rev-parse", "HEAD", cwd=ws) == sh("git", "rev-parse", "feature", cwd=bare)
    assert (ws / "feature.txt").exists()


async def test_workspace_reused_when_valid(bare: Path, workspaces: Workspaces) -> None:
    spec = WorkspaceSpec("root-1", str(bare))
    ws = await workspaces.ensure(spec)
    (ws / "work-in-progress.txt").write_text("keep me")
    assert await workspaces.ensure(spec) == ws
    assert (ws / "work-in-progress.txt").read_text() == "keep me"


@pytest.mark.parametrize("damage", ["metadata", "git_dir", "other_source"])
async def test_workspace_recreated_when_corrupt(
    bare: Path, workspaces: Workspaces, damage: str
) -> None:
    spec = WorkspaceSpec("root-1", str(bare))
    ws = await workspaces.ensure(spec)
    (ws / "stale.txt").write_text("from the broken copy")
    match damage:
        case "metadata":
            WorkspaceState(ws).record_path.write_text("{not json")
        case "git_dir":
            (ws / ".git" / "HEAD").unlink()
        case "other_source":
            spec = WorkspaceSpec("root-1", str(bare), ref="feature")
    assert await workspaces.ensure(spec) == ws
    assert not (ws / "stale.txt").exists()
    assert sh("git", "rev-parse", "--verify", "HEAD", cwd=ws)


async def test_unsafe_root_task_id_refused_when_it_is_a_path(workspaces: Workspaces) -> None:
    with pytest.raises(ConfigError):
        await workspaces.ensure(WorkspaceSpec("../escape", "/nonexistent"))


async def test_credentials_refused_when_embedded_in_url(workspaces: Workspaces) -> None:
    with pytest.raises(ConfigError):
        await workspaces.ensure(WorkspaceSpec("r", f"https://x:{TOKEN}@127.0.0.1/repo.git"))


def test_token_only_in_environment_when_command_built() -> None:
    url = "https://127.0.0.1/repo.git"
    command = git_command(["clone", url, "dest"], token=TOKEN, url=url)
    assert not any(TOKEN in arg for arg in command.argv)
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert not any(basic in arg for arg in command.argv)
    assert not any(basic in value for value in command.env.values())
    assert command.env["GIT_CONFIG_KEY_1"] == "credential.helper"
    assert TOKEN not in command.env["GIT_CONFIG_VALUE_1"]  # the helper names the variable
    assert command.env["KEEL_GIT_TOKEN"] == TOKEN
    assert "KEEL_GIT_TOKEN" not in git_command(["status"]).env


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def test_token_written_nowhere_when_https_clone_fails(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    workspaces = Workspaces(tmp_path / "workspaces", sandbox="none")
    url = f"https://127.0.0.1:{free_port()}/org/repo.git"
    with pytest.raises(Retryable) as failure:
        await workspaces.ensure(WorkspaceSpec("root-1", url), token=TOKEN)
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    for secret in (TOKEN, basic):
        assert secret not in str(failure.value)
        assert secret not in caplog.text
        assert not [p for p in written if secret.encode() in p.read_bytes()]


class _RecordingHandler(http.server.BaseHTTPRequestHandler):
    seen: ClassVar[list[str | None]] = []

    def do_GET(self) -> None:
        # Like GitHub: challenge a request without credentials, so git asks its helper.
        authorization = self.headers.get("Authorization")
        self.seen.append(authorization)
        self.send_response(404 if authorization else 401)
        if not authorization:
            self.send_header("WWW-Authenticate", 'Basic realm="GitHub"')
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def http_server() -> Iterator[tuple[str, list[str | None]]]:
    _RecordingHandler.seen = []
    server = http.server.HTTPServer(("127.0.0.1", 0), _RecordingHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/repo.git", _RecordingHandler.seen
    server.shutdown()
    server.server_close()


async def test_token_sent_by_the_credential_helper_when_the_remote_challenges(
    http_server: tuple[str, list[str | None]],
) -> None:
    url, seen = http_server
    result = await git(["ls-remote", url], token=TOKEN, url=url, timeout_s=30)
    assert not result.ok
    basic = base64.b64encode(f"x-access-token:{TOKEN}".encode()).decode()
    assert seen[0] is None  # nothing is sent before the remote asks
    assert f"Basic {basic}" in seen[1:]
    assert TOKEN not in result.stderr


async def test_workspace_of_an_older_keel_kept_aside_when_cloned_again(
    bare: Path, workspaces: Workspaces
) -> None:
    """A workspace whose record is inside it (Keel before its state folder) is not trusted,
    and not deleted either: its files are kept where no command can reach them."""
    spec = WorkspaceSpec("root-1", str(bare))
    ws = workspaces.path_for("root-1")
    sh("git", "clone", "-q", str(bare), str(ws))
    (ws / ".keel").mkdir()
    (ws / ".keel" / "workspace.json").write_text('{"repo_url": "/elsewhere"}')
    (ws / "unsaved.txt").write_text("work in progress")
    assert await workspaces.ensure(spec) == ws
    assert not (ws / "unsaved.txt").exists()
    [kept] = (workspaces.root / ".keel-state").glob("legacy-root-1-*")
    assert (kept / "unsaved.txt").read_text() == "work in progress"
    assert WorkspaceState(ws).read_record() is not None


@pytest.mark.parametrize("ref", ["--orphan=evil", "-b"])
async def test_ref_that_reads_as_an_option_refused_when_cloning(
    bare: Path, workspaces: Workspaces, ref: str
) -> None:
    """A pull request's branch name comes from whoever opened it: it never becomes a flag."""
    with pytest.raises(NotFound):
        await workspaces.ensure(WorkspaceSpec("root-1", str(bare), ref=ref))
    assert not workspaces.path_for("root-1").exists()
