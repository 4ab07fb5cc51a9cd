"""Attack 1 of issue #37: configuration that makes git run a program, planted in the workspace.

A sandboxed command (what an injected model runs) writes the workspace's ``.git/config`` (or a
file it includes, the hooks, the attributes, a ``$HOME`` config), then Keel's own tools touch
the workspace: ``git_commit``, the push preview, ``git_push``, both reconciles and the
work-in-progress save. Every key family that makes git run a program points at one hostile
program, which tries to leave a mark on the host, read the environment of every process it
can see (a host process holds the secrets in its initial environment) and carry what it
found out through the workspace, a commit or git's stderr.

The design allows that program to run *inside* the sandbox; it must never run on the host,
and no secret may reach a tool's output, the workspace, or what was pushed.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.tools.base import Completed
from runtime.tools.devbox import GitCommit, GitPush, WriteFile
from tests.security.kit import (
    CANARY,
    PAYLOAD,
    Host,
    Payloads,
    all_objects,
    assert_clean,
    branch_sha,
    context,
    git_config_sh,
    git_sh,
    make_origin,
    new_workspace,
    preview,
    reconcile,
    run,
    save_work_in,
    settle,
    workspace_texts,
    write_files_sh,
)

HOOKS = (
    "applypatch-msg", "pre-applypatch", "post-applypatch", "pre-commit", "pre-merge-commit",
    "prepare-commit-msg", "commit-msg", "post-commit", "pre-rebase", "post-checkout",
    "post-merge", "pre-push", "pre-receive", "update", "proc-receive", "post-receive",
    "post-update", "reference-transaction", "push-to-checkout", "pre-auto-gc", "post-rewrite",
    "sendemail-validate", "fsmonitor-watchman", "p4-changelist", "p4-prepare-changelist",
    "p4-post-changelist", "p4-pre-submit", "post-index-change",
)  # fmt: skip


@dataclass(frozen=True, slots=True)
class Plant:
    """The shell a hostile command runs in the workspace, given the payload's invocation."""

    name: str
    script: Callable[[Path, Callable[..., str]], str]


def _hook_files(folder: str, p: Callable[..., str]) -> dict[str, str]:
    return {
        f"{folder}/{hook}": f'#!/bin/sh\nexec {p("hook-" + hook, "stdin")} "$@"\n' for hook in HOOKS
    }


def _hooks(folder: str, p: Callable[..., str]) -> str:
    files = _hook_files(folder, p)
    return write_files_sh(files, executable=list(files))


def _signed_commit(ws: Path, p: Callable[..., str]) -> str:
    """A signed commit in the history, made inside the sandbox, so that a git that verifies
    signatures (log.showSignature) has one to verify."""
    return (
        "git config user.name m && git config user.email m@localhost && "
        "echo signed > signed.txt && git add signed.txt && "
        f"git -c commit.gpgsign=true -c gpg.program={shlex.quote(p('sign-in-sandbox', 'gpg'))} "
        "commit -qm signed"
    )


def _include_file(p: Callable[..., str]) -> str:
    return "\n".join(
        [
            '[filter "pwni"]',
            f"\tclean = {p('include-clean', 'filter')}",
            f"\tsmudge = {p('include-smudge', 'filter')}",
            "[core]",
            f"\tfsmonitor = {p('include-fsmonitor')}",
            f"\tsshCommand = {p('include-ssh', 'fail')}",
            f"\thooksPath = {PAYLOAD.parent}/hooks",
            "[gpg]",
            f"\tprogram = {p('include-gpg', 'gpg')}",
            "[commit]",
            "\tgpgsign = true",
            "[credential]",
            f"\thelper = !{p('include-cred', 'stdin')}",
            "",
        ]
    )


PLANTS = [
    Plant(
        "filter-clean-smudge",
        lambda ws, p: (
            write_files_sh({".gitattributes": "* filter=pwn\n"})
            + "\n"
            + git_config_sh(
                [
                    ("filter.pwn.clean", p("filter-clean", "filter")),
                    ("filter.pwn.smudge", p("filter-smudge", "filter")),
                    ("filter.pwn.required", "true"),
                ]
            )
        ),
    ),
    Plant(
        "filter-process",
        lambda ws, p: (
            write_files_sh({".gitattributes": "* filter=pwnp\n"})
            + "\n"
            + git_config_sh([("filter.pwnp.process", p("filter-process", "fail"))])
        ),
    ),
    Plant(
        "fsmonitor",
        lambda ws, p: git_config_sh(
            [
                ("core.fsmonitor", p("fsmonitor")),
                ("core.fsmonitorHookVersion", "2"),
                ("core.untrackedCache", "true"),
            ]
        ),
    ),
    Plant(
        "core-hooksPath",
        lambda ws, p: (
            _hooks(".attack/hooks", p)
            + "\n"
            + git_config_sh([("core.hooksPath", str(ws / ".attack" / "hooks"))])
        ),
    ),
    Plant("git-hooks-dir", lambda ws, p: _hooks(".git/hooks", p)),
    Plant(
        "ssh-command",
        lambda ws, p: git_config_sh(
            [
                ("core.sshCommand", p("ssh-command", "fail")),
                ("remote.origin.pushurl", "ssh://git@127.0.0.1:9/x.git"),
                ("url.ssh://git@127.0.0.1:9/.insteadOf", str(ws.parent.parent / "origin.git")),
                ("ssh.variant", "ssh"),
            ]
        ),
    ),
    Plant(
        "git-proxy",
        lambda ws, p: git_config_sh(
            [
                ("core.gitProxy", p("git-proxy", "fail")),
                ("remote.origin.pushurl", "git://127.0.0.1:9/x.git"),
            ]
        ),
    ),
    Plant(
        "ext-transport",
        lambda ws, p: git_config_sh(
            [
                ("protocol.ext.allow", "always"),
                ("protocol.allow", "always"),
                ("remote.origin.pushurl", f"ext::{p('ext-transport', 'fail')}"),
                ("remote.origin.vcs", "pwn"),
            ]
        ),
    ),
    Plant(
        "gpg-openpgp",
        lambda ws, p: git_config_sh(
            [
                ("gpg.program", p("gpg-program", "gpg")),
                ("gpg.openpgp.program", p("gpg-openpgp", "gpg")),
                ("commit.gpgsign", "true"),
                ("tag.gpgsign", "true"),
                ("push.gpgSign", "if-asked"),
                ("user.signingKey", "0123456789ABCDEF"),
            ]
        ),
    ),
    Plant(
        "gpg-ssh-x509",
        lambda ws, p: git_config_sh(
            [
                ("gpg.format", "ssh"),
                ("gpg.ssh.program", p("gpg-ssh", "gpg")),
                ("gpg.ssh.defaultKeyCommand", p("gpg-ssh-key")),
                ("gpg.x509.program", p("gpg-x509", "gpg")),
                ("commit.gpgsign", "true"),
            ]
        ),
    ),
    Plant(
        "show-signature",
        lambda ws, p: (
            _signed_commit(ws, p)
            + "\n"
            + git_config_sh(
                [
                    ("log.showSignature", "true"),
                    ("gpg.program", p("gpg-verify")),
                    ("gpg.ssh.program", p("gpg-ssh-verify")),
                ]
            )
        ),
    ),
    Plant(
        "credential-askpass",
        lambda ws, p: git_config_sh(
            [
                ("credential.helper", f"!{p('credential-helper', 'stdin')}"),
                ("credential.http://127.0.0.1.helper", f"!{p('credential-url-helper', 'stdin')}"),
                ("core.askPass", p("askpass")),
            ]
        ),
    ),
    Plant(
        "pager-diff-textconv-merge",
        lambda ws, p: (
            write_files_sh({".gitattributes": "* diff=pwn merge=pwn\n"})
            + "\n"
            + git_config_sh(
                [
                    ("core.pager", p("core-pager", "filter")),
                    ("pager.log", p("pager-log", "filter")),
                    ("pager.diff", p("pager-diff", "filter")),
                    ("diff.external", p("diff-external")),
                    ("diff.pwn.textconv", p("diff-textconv", "textconv")),
                    ("diff.pwn.command", p("diff-command")),
                    ("merge.pwn.driver", p("merge-driver")),
                    ("diff.pwn.cachetextconv", "false"),
                ]
            )
        ),
    ),
    Plant(
        "editors-trailers",
        lambda ws, p: git_config_sh(
            [
                ("core.editor", p("core-editor")),
                ("sequence.editor", p("sequence-editor")),
                ("trailer.pwn.cmd", p("trailer-cmd")),
                ("trailer.pwn.command", p("trailer-command")),
                ("trailer.pwn.ifMissing", "add"),
                ("commit.cleanup", "strip"),
            ]
        ),
    ),
    Plant(
        "pack-programs",
        lambda ws, p: git_config_sh(
            [
                ("uploadpack.packObjectsHook", p("pack-objects-hook", "fail")),
                ("remote.origin.uploadpack", p("uploadpack", "fail")),
                ("remote.origin.receivepack", p("receivepack", "fail")),
            ]
        ),
    ),
    Plant(
        "include-path",
        lambda ws, p: (
            _hooks(".attack/hooks", p)
            + "\n"
            + write_files_sh(
                {".attack/evil.inc": _include_file(p), ".gitattributes": "* filter=pwni\n"}
            )
            + "\n"
            + git_config_sh(
                [
                    ("include.path", str(ws / ".attack" / "evil.inc")),
                    ("includeIf.gitdir:/.path", str(ws / ".attack" / "evil.inc")),
                    ("includeIf.onbranch:**.path", "../.attack/evil.inc"),
                ]
            )
        ),
    ),
    Plant(
        "worktree-config",
        lambda ws, p: (
            write_files_sh({".gitattributes": "* filter=pwnw\n"})
            + "\n"
            + git_config_sh(
                [("core.repositoryformatversion", "1"), ("extensions.worktreeConfig", "true")]
            )
            + "\n"
            + git_config_sh(
                [
                    ("filter.pwnw.clean", p("worktree-clean", "filter")),
                    ("core.fsmonitor", p("worktree-fsmonitor")),
                ],
                file=".git/config.worktree",
            )
        ),
    ),
    Plant(
        "attributes-elsewhere",
        lambda ws, p: (
            write_files_sh(
                {".attack/attrs": "* filter=pwna\n", ".git/info/attributes": "* filter=pwna\n"}
            )
            + "\n"
            + git_config_sh(
                [
                    ("core.attributesFile", str(ws / ".attack" / "attrs")),
                    ("filter.pwna.clean", p("attributes-clean", "filter")),
                ]
            )
        ),
    ),
    Plant("home-and-tmp-config", lambda ws, p: _home_configs(p)),
]


def _home_configs(p: Callable[..., str]) -> str:
    """Config files git reads from $HOME and $XDG_CONFIG_HOME: the command's own $HOME, and
    /tmp (the $HOME a sandboxed git of Keel's may be given)."""
    entries = [
        ("filter.pwnh.clean", p("home-clean", "filter")),
        ("core.sshCommand", p("home-ssh", "fail")),
        ("gpg.program", p("home-gpg", "gpg")),
        ("commit.gpgsign", "true"),
        ("core.fsmonitor", p("home-fsmonitor")),
        ("core.hooksPath", str(PAYLOAD.parent / "hooks")),
    ]
    lines = [write_files_sh({".gitattributes": "* filter=pwnh\n"}), _hooks(".attack/hooks", p)]
    for config in (
        '"$HOME/.gitconfig"',
        '"$HOME/.config/git/config"',
        "/tmp/.gitconfig",
        "/tmp/.config/git/config",
    ):
        lines.append(f'mkdir -p "$(dirname {config})"')
        lines += [
            f"git config --file {config} --add {shlex.quote(k)} {shlex.quote(v)}"
            for k, v in entries
        ]
    return "\n".join(lines)


async def _drive(
    ws: Path, origin: Path, sqlite_url: str, branch: str
) -> tuple[list[str], Completed, Completed]:
    """Every tool that reads or moves the workspace's repository, as an agent and the
    executor would call them after the attack; what each said."""
    outputs: list[str] = []
    commit, push = GitCommit(), GitPush()
    wrote = await settle(WriteFile(), {"path": "src/change.txt", "content": "x\n"}, context(ws))
    outputs.append(wrote.output)
    commit_ctx = context(ws, "call-commit")
    committed = await settle(commit, {"message": "a change"}, commit_ctx)
    outputs.append(committed.output)
    outputs.append(await reconcile(commit, {"message": "a change"}, commit_ctx))
    args = {"branch": branch}
    outputs.append(await preview(push, args, context(ws, "call-preview")))
    pushed = await settle(push, args, context(ws, "call-push"))
    outputs.append(pushed.output)
    outputs.append(await reconcile(push, args, context(ws, "call-push")))
    wrote = await settle(WriteFile(), {"path": "src/more.txt", "content": "y\n"}, context(ws))
    outputs.append(wrote.output)
    outputs.append(await save_work_in(sqlite_url, ws, GitCommit(), GitPush()))
    return outputs, committed, pushed


def _assert_nothing_escaped(host: Host, ws: Path, origin: Path, outputs: list[str]) -> None:
    host.assert_untouched()
    assert_clean(outputs, where="a tool's output")
    assert_clean(workspace_texts(ws), where="the workspace (what a later read_file would show)")
    assert_clean([all_objects(origin)], where="what was pushed to the origin")


@pytest.mark.parametrize("plant", PLANTS, ids=[p.name for p in PLANTS])
async def test_hostile_git_config_never_runs_on_the_host_when_keel_commits_and_pushes(
    tmp_path: Path, host: Host, sqlite_url: str, plant: Plant
) -> None:
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n", "src/app.py": "1\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    p = Payloads(ws)
    plan = plant.script(ws, p)
    script = "\n".join(["set -e", write_files_sh(p.files(host), p.executables()), plan])
    planted = await run(workspaces.sandbox, ws, script + "\necho planted")
    assert "planted" in planted.output and "exit code 0" in planted.output, planted.output

    outputs, _, _ = await _drive(ws, origin, sqlite_url, "keel/attack")

    _assert_nothing_escaped(host, ws, origin, [planted.output, *outputs])


async def test_filter_shipped_by_the_repository_never_runs_on_the_host_when_included(
    tmp_path: Path, host: Host, sqlite_url: str
) -> None:
    """The repository ships the attributes, the program and an includable config; the
    injected command only has to add one ``include.path``."""
    seed_ws = tmp_path / "ws" / "root-1"  # where the workspace will be: the payload names it
    p = Payloads(seed_ws)
    include = _include_file(p) + f'[diff "pwn"]\n\ttextconv = {p("shipped-textconv", "textconv")}\n'
    hooks = _hook_files(".attack/hooks", p)
    files = {
        "README.md": "hello\n",
        ".gitattributes": "* filter=pwni diff=pwn\n",
        ".attack/evil.inc": include,
        **hooks,
        **p.files(host),
    }
    origin = make_origin(tmp_path / "origin.git", files, executable=[*p.executables(), *hooks])
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    assert ws == seed_ws
    planted = await run(workspaces.sandbox, ws, "git config include.path ../.attack/evil.inc")
    assert "exit code 0" in planted.output, planted.output

    outputs, _, _ = await _drive(ws, origin, sqlite_url, "keel/shipped")

    _assert_nothing_escaped(host, ws, origin, [planted.output, *outputs])


async def test_git_dir_redirected_elsewhere_moves_nothing_of_another_repository(
    tmp_path: Path, host: Host, sqlite_url: str
) -> None:
    """``.git`` replaced by a gitfile naming another task's repository, then ``commondir``
    naming a host repository: Keel's commit and push must neither write there nor carry
    their content out."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    _, other = await new_workspace(tmp_path / "ws", str(origin), task="root-2")
    (other / "private.txt").write_text(f"task B's work {CANARY}\n")
    victim = make_origin(tmp_path / "victim.git", {"secret.txt": f"{CANARY}\n"})
    other_head, victim_head = git_sh("rev-parse", "HEAD", cwd=other), branch_sha(victim, "main")
    planted = await run(
        workspaces.sandbox,
        ws,
        f"mv .git .git-real && printf 'gitdir: {other}/.git\\n' > .git && echo planted",
    )
    assert "planted" in planted.output, planted.output
    outputs, _, _ = await _drive(ws, origin, sqlite_url, "keel/redirected")
    again = await run(
        workspaces.sandbox,
        ws,
        f"rm -f .git && mv .git-real .git && printf '{victim}\\n' > .git/commondir && echo again",
    )
    assert "again" in again.output, again.output
    outputs += [again.output, *(await _drive(ws, origin, sqlite_url, "keel/commondir"))[0]]

    host.assert_untouched()
    assert git_sh("rev-parse", "HEAD", cwd=other) == other_head
    assert git_sh("status", "--porcelain", cwd=other) == "?? private.txt"
    assert branch_sha(victim, "main") == victim_head
    assert git_sh("for-each-ref", "--format=%(refname)", cwd=victim) == "refs/heads/main"
    assert_clean(outputs)
    assert_clean([all_objects(origin)], where="what was pushed to the origin")


async def test_worktree_pointed_at_a_host_folder_exports_none_of_it(
    tmp_path: Path, host: Host, sqlite_url: str
) -> None:
    """``core.worktree`` (and ``GIT_WORK_TREE``-like tricks) naming a host folder: a git_commit
    that ran on the host would add that folder's files (Keel's database, say) and git_push
    would publish them. No program runs here; the data itself is the loot."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    planted = await run(
        workspaces.sandbox, ws, f"git config core.worktree {shlex.quote(str(host.vault))}"
    )
    assert "exit code 0" in planted.output, planted.output

    outputs, _, _ = await _drive(ws, origin, sqlite_url, "keel/worktree")

    host.assert_untouched()
    assert_clean(outputs)
    assert_clean([all_objects(origin)], where="what was pushed to the origin")
