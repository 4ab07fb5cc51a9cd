"""Git over HTTPS with the installation token: real git against the emulator's smart-HTTP remote.

The emulator serves real TLS with a certificate made at start; git trusts it the way an operator
makes it trust a private CA, through ``GIT_SSL_CAINFO``, which Keel passes to git.

The remote answers 401 without a token it issued, so a push that succeeds proves the token was
sent; the credential helper is the only way it travels, so no argv, file or log may hold it.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from adapters.checkouts import Checkouts
from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState
from adapters.emulators.server import RunningServer, serve
from adapters.github.client import GitHubClient
from runtime.scheduler import Scheduler
from runtime.store.records import TaskSpec, TaskStatus
from runtime.tools.base import Completed, ToolContext
from runtime.tools.devbox import GitCommit, GitPush
from runtime.workspace import Workspaces, WorkspaceSpec
from tests.factories import app_key_pair, make_spec
from tests.integration.scripted_keel import rows_containing, run_one, scripted_keel
from tests.ports import Credentials

REPO = "acme/widgets"


@dataclass(frozen=True, slots=True)
class Remote:
    state: GitHubState
    url: str

    @property
    def clone_url(self) -> str:
        return f"{self.url}/{REPO}.git"

    def token(self) -> str:
        return self.state.issue_installation_token(self.state.installation_id).token


def _trust(server: RunningServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """Git (GIT_SSL_CAINFO) and PyGithub (REQUESTS_CA_BUNDLE) trust the emulator's certificate."""
    assert server.url.startswith("https://") and server.ca_file is not None
    monkeypatch.setenv("GIT_SSL_CAINFO", str(server.ca_file))
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(server.ca_file))
    monkeypatch.setenv("SSL_CERT_FILE", str(server.ca_file))


@pytest.fixture
def remote(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Remote]:
    state = GitHubState()
    state.add_git_repo(REPO, tmp_path / "remote", files={"app.py": "print('hi')\n"})
    with serve(create_github_app(state), tls=True) as server:
        _trust(server, monkeypatch)
        yield Remote(state, server.url)


def _ctx(ws: Path, call_id: str) -> ToolContext:
    return ToolContext(task_id="t-1", root_task_id="t-1", call_id=call_id, workspace=ws)


class CmdlineSampler:
    """Reads every process's argv while running: a token in any argv would be seen here."""

    def __init__(self, secret: str) -> None:
        self.secret = secret.encode()
        self.samples = 0
        self.leaks: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> CmdlineSampler:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.is_set():
            for pid in os.listdir("/proc"):
                if not pid.isdigit():
                    continue
                try:
                    argv = Path(f"/proc/{pid}/cmdline").read_bytes()
                except OSError:
                    continue
                self.samples += 1
                if self.secret in argv:
                    self.leaks.append(argv.decode(errors="replace"))


async def _cloned_with_change(remote: Remote, tmp_path: Path, token: str | None) -> Path:
    workspaces = Workspaces(tmp_path / "workspaces", sandbox="none")
    ws = await workspaces.ensure(WorkspaceSpec("t-1", remote.clone_url), token)
    (ws / "app.py").write_text("print('hello')\n")
    committed = await GitCommit().start({"message": "Say hello"}, _ctx(ws, "c-1"))
    assert isinstance(committed, Completed), committed
    assert not committed.is_error, committed.output
    return ws


async def test_push_lands_on_the_remote_and_the_token_is_nowhere_when_pushed_with_the_token(
    remote: Remote, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    token = remote.token()
    ws = await _cloned_with_change(remote, tmp_path, token)
    credentials = Credentials(token)
    push = GitPush(credentials=credentials)

    with CmdlineSampler(token) as sampler:
        outcome = await push.start({"branch": "keel/hello"}, _ctx(ws, "c-2"))

    assert isinstance(outcome, Completed), outcome
    assert not outcome.is_error, outcome.output
    assert "read back with ls-remote" in outcome.output
    bare = remote.state.repos[REPO].git_dir
    assert bare is not None
    local_head = (ws / ".git" / "HEAD").read_text()
    assert remote.state.repos[REPO].branch_sha("keel/hello") is not None
    assert credentials.asked and credentials.asked[0] == ("t-1", remote.clone_url)
    assert sampler.samples > 0 and sampler.leaks == []
    for path in [*tmp_path.rglob("*")]:
        if path.is_file() and not path.is_symlink():
            assert token.encode() not in path.read_bytes(), path
    assert token not in caplog.text and token not in outcome.output
    assert token not in local_head


async def test_push_fails_with_a_clear_error_when_keel_has_no_token(
    remote: Remote, tmp_path: Path
) -> None:
    ws = await _cloned_with_change(remote, tmp_path, remote.token())
    refusals = remote.state.git_refusals

    outcome = await GitPush(credentials=Credentials(None)).start(
        {"branch": "keel/hello"}, _ctx(ws, "c-2")
    )

    assert isinstance(outcome, Completed) and outcome.is_error
    assert "requires credentials and Keel has no token" in outcome.output
    assert remote.state.git_refusals > refusals
    resolve_branch = remote.state.repos[REPO].resolve_branch
    assert resolve_branch is not None
    assert resolve_branch("keel/hello") is None


async def test_push_is_refused_when_the_token_belongs_to_another_installation(
    remote: Remote, tmp_path: Path
) -> None:
    ws = await _cloned_with_change(remote, tmp_path, remote.token())
    remote.state.add_installation(777, "other-org")
    foreign = remote.state.issue_installation_token(777).token

    outcome = await GitPush(credentials=Credentials(foreign)).start(
        {"branch": "keel/hello"}, _ctx(ws, "c-2")
    )

    assert isinstance(outcome, Completed) and outcome.is_error
    assert "refused Keel's token" in outcome.output and foreign not in outcome.output


async def test_clone_fails_when_the_remote_requires_a_token_and_none_is_given(
    remote: Remote, tmp_path: Path
) -> None:
    workspaces = Workspaces(tmp_path / "workspaces", sandbox="none")
    with pytest.raises(Exception, match="clone"):
        await workspaces.ensure(WorkspaceSpec("t-1", remote.clone_url), None)


# -- many installations ---------------------------------------------------------------------


async def test_each_task_clones_and_pushes_with_its_own_installation_token_when_two_are_installed(
    tmp_path: Path, scheduler: Scheduler, monkeypatch: pytest.MonkeyPatch
) -> None:
    private, public = app_key_pair()
    state = GitHubState(app_public_key=public)
    state.add_installation(501, "acme")
    state.add_installation(502, "globex")
    state.add_git_repo("acme/rockets", tmp_path / "remote", installation_id=501)
    state.add_git_repo("globex/widgets", tmp_path / "remote", installation_id=502)
    with serve(create_github_app(state), tls=True) as server:
        _trust(server, monkeypatch)
        client = GitHubClient.as_installation(server.url, state.app_id, private, timeout_s=5)
        # Neither is in workspace.repositories: both come from the App, on demand.
        checkouts = Checkouts(
            Workspaces(tmp_path / "ws", sandbox="none"), {}, scheduler, host=client,
            allow=("acme/*", "globex/*"),
        )
        client_installations = client.installations
        assert client_installations is not None
        client_installations.remember("acme/rockets", 501)  # what acme's webhook said
        for repo in ("acme/rockets", "globex/widgets"):
            spec = make_spec(repo=repo, message=repo)
            task = (await scheduler.transact(scheduler.schedule, spec)).task
            ws = await checkouts.workspace_for(task)
            assert ws is not None and (ws / "README.md").is_file()
            (ws / "change.txt").write_text(repo)
            ctx = ToolContext(task.task_id, task.task_id, "c-1", workspace=ws)
            assert isinstance(await GitCommit().start({"message": repo}, ctx), Completed)
            pushed = await GitPush(credentials=checkouts).start({"branch": "keel/x"}, ctx)
            assert isinstance(pushed, Completed), pushed
            assert not pushed.is_error, pushed.output
            assert state.repos[repo].branch_sha("keel/x") is not None
    issued = {t.installation_id for t in state.tokens.values() if t.installation_id}
    assert issued == {501, 502}
    assert client_installations.tokens_issued == 2  # cached: clone and push shared one each


async def test_a_repository_outside_the_allow_list_gets_no_checkout(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    private, public = app_key_pair()
    state = GitHubState(app_public_key=public)
    state.add_git_repo("evil/repo", tmp_path / "remote")
    with serve(create_github_app(state)) as server:
        client = GitHubClient.as_installation(server.url, state.app_id, private, timeout_s=5)
        checkouts = Checkouts(
            Workspaces(tmp_path / "ws", sandbox="none"),
            {},
            scheduler,
            host=client,
            allow=("acme/*",),
        )
        task = (await scheduler.transact(scheduler.schedule, make_spec(repo="evil/repo"))).task
        assert await checkouts.workspace_for(task) is None
    assert not list((tmp_path / "ws").glob("*/*"))


async def test_a_task_that_outlives_its_installation_token_pushes_with_a_fresh_one(
    tmp_path: Path, scheduler: Scheduler
) -> None:
    private, public = app_key_pair()
    state = GitHubState(app_public_key=public)
    state.add_git_repo(REPO, tmp_path / "remote")
    with serve(create_github_app(state)) as server:
        client = GitHubClient.as_installation(
            server.url, state.app_id, private, state.installation_id, timeout_s=5
        )
        installations = client.installations
        assert installations is not None
        checkouts = Checkouts(
            Workspaces(tmp_path / "ws", sandbox="none"), {}, scheduler, host=client
        )
        task = (await scheduler.transact(scheduler.schedule, make_spec(repo=REPO))).task
        ws = await checkouts.workspace_for(task)
        assert ws is not None
        (ws / "late.txt").write_text("hours later")
        ctx = ToolContext(task.task_id, task.task_id, "c-1", workspace=ws)
        assert isinstance(await GitCommit().start({"message": "late"}, ctx), Completed)
        # An hour passes: the clone's token has expired on GitHub's side.
        state.expire_token()
        installations.now = lambda: time.time() + 3600

        pushed = await GitPush(credentials=checkouts).start({"branch": "keel/late"}, ctx)

    assert isinstance(pushed, Completed), pushed
    assert not pushed.is_error, pushed.output
    assert installations.tokens_issued >= 2  # the clone's, then fresh ones for the push
    assert state.repos[REPO].branch_sha("keel/late") is not None


async def test_clone_fails_on_the_certificate_when_git_is_not_told_to_trust_the_remotes_ca(
    remote: Remote, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("GIT_SSL_CAINFO")
    monkeypatch.delenv("SSL_CERT_FILE")
    token = remote.token()
    workspaces = Workspaces(tmp_path / "workspaces", sandbox="none")
    with pytest.raises(Exception, match=r"(?i)certificate|SSL") as raised:
        await workspaces.ensure(WorkspaceSpec("t-1", remote.clone_url), token)
    assert token not in str(raised.value)


# -- a whole task ---------------------------------------------------------------------------


async def test_task_pushes_over_https_and_its_token_is_in_no_row_reply_file_or_log(
    remote: Remote, tmp_path: Path, db_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Keel, started from config, runs a task whose agent writes, commits and pushes to the
    emulator's HTTPS remote with the repository's token; afterwards the token is in no
    database row (its transcript and tool calls included), file or log line."""
    caplog.set_level(logging.DEBUG)
    token = remote.token()
    write = {"name": "write_file", "args": {"path": "app.py", "content": "print('hey')\n"}}
    turns: list[dict[str, Any]] = [
        {"tool_calls": [write]},
        {"tool_calls": [{"name": "git_commit", "args": {"message": "Say hey"}}]},
        {"tool_calls": [{"name": "git_push", "args": {"branch": "keel/hey"}}]},
        {"say": "pushed keel/hey"},
    ]
    repositories = {REPO: {"url": remote.clone_url, "token": token}}
    keel = scripted_keel(tmp_path, db_url, turns, repositories)
    keel.migrate()
    spec = TaskSpec(agent="default", message="say hey", repo=REPO)
    current = await run_one(keel, spec, timeout_s=30)

    assert current is not None and current.status is TaskStatus.succeeded, current
    assert remote.state.repos[REPO].branch_sha("keel/hey") is not None  # the push landed
    assert token not in caplog.text
    for path in tmp_path.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert token.encode() not in path.read_bytes(), path
    assert rows_containing(db_url, token) == []
    assert rows_containing(db_url, "keel/hey") != []  # the scan does see what the task wrote
