"""Attacks 3, 4, 5 and 8 of issue #37: what one command (or the repository) leaves for the next
sandbox, what a ``pyvenv.cfg`` can mount, the privileges a command keeps, and the secrets it
can read.

- Symlinks for every path Keel used or uses for itself (``.keel``, ``.keel/tmp``,
  ``.keel/home``, ``.keel/exec``, the state folder beside the workspace, the mount points in
  the command's own ``/tmp``), made by a command or shipped by the repository: the next
  command sees none of the host (the vault's canary, Keel's database, the host's ``/``) and
  writes nowhere on it.
- A ``pyvenv.cfg`` whose ``home`` names ``/proc``, ``/``, ``/root``, a host folder, the
  workspaces' root or Keel's state: the next command still cannot read another process's
  environment, the canary, another workspace or Keel's records.
- ``CapEff`` is 0 with no new privileges in every sandboxed command, as root and as an
  unprivileged user, and in the git Keel runs in the workspace; ``mknod``, ``mount`` and new
  user namespaces fail.
- No secret of the test's environment (nor of a host process's) is visible to a command, and
  the network (Keel's own loopback API included) is out of reach.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import stat
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

from runtime.errors import KeelError
from runtime.tools.devbox import GitCommit, WriteFile
from runtime.workspace import Sandbox, Workspaces
from runtime.workspace.egress import Egress
from runtime.workspace.sandbox import toolchain_roots
from tests.security.kit import (
    CANARY,
    LOOT_MARK,
    SECRETS,
    SENTINEL_TAG,
    Evil,
    Host,
    Payloads,
    assert_clean,
    context,
    git_config_sh,
    make_origin,
    new_workspace,
    relink_sh,
    run,
    sections,
    serving,
    settle,
    state_of,
    streams,
    wait_for,
    write_files_sh,
)

# -- what a command leaves for the next sandbox ----------------------------------------------

HOST_ROOT_ENTRIES = {"etc", "usr", "var", "root", "proc", "boot", "home", "opt", "srv"}
_OURS = re.compile(r"^([0-9a-f]{16}|written-[0-9a-f]+|exec|workspace\.(json|tmp)|pytest-of-.*)$")


@contextmanager
def _host_root_cleaned() -> Iterator[None]:
    """Old code followed these links and wrote into the host's ``/``: undo that, and only that."""
    before = {folder: set(os.listdir(folder)) for folder in ("/", "/tmp")}
    try:
        yield
    finally:
        for folder, names in before.items():
            for name in set(os.listdir(folder)) - names:
                path = Path(folder) / name
                if not _OURS.match(name) or (folder == "/tmp" and "written-" not in name):
                    continue
                if path.is_dir() and not path.is_symlink():
                    shutil.rmtree(path, ignore_errors=True)
                else:
                    path.unlink()


def _probe(ws: Path, host: Host, mark: str) -> str:
    """What the next command tries: read the canary every way a link could have exposed it,
    list its /tmp, read Keel's state, and write a mark wherever a link could lead."""
    vault, state, root = host.vault, state_of(ws), ws.parent
    reads = [
        f"{vault}/canary.txt",
        f"/tmp{vault}/canary.txt",
        "/tmp/canary.txt",
        "/tmp/keel.db",
        f"/tmp{vault}/keel.db",
        ".keel/canary.txt",
        ".keel/tmp/canary.txt",
        ".keel/exec/canary.txt",
        ".keel/home/canary.txt",
        '"$HOME/canary.txt"',
        '"$HOME/vault/canary.txt"',
        f"/tmp{ws}/.keel/tmp/canary.txt",
        "/tmp/etc/shadow",
        f"{state}/workspace.json",
        f"{state}/mirror.git/config",
        f"{root}/root-2/private.txt",
    ]
    writes = [
        "/tmp",
        ".keel",
        ".keel/tmp",
        ".keel/exec",
        ".keel/home",
        '"$HOME"',
        f"{state}/tmp",
        f"{state}/exec",
        f"/tmp{vault}",
    ]
    return "\n".join(
        [
            "echo @@reads",
            *[f"cat {path}" for path in reads],
            "echo @@tmp",
            "ls -A /tmp",
            "echo @@state",
            f"ls -A {state} {state}/exec {state}/mirror.git",
            "echo @@writes",
            *[f"touch {path}/written-{mark}" for path in writes],
            "echo @@done",
        ]
    )


def _assert_no_state_visible(reads: str, listing: str) -> None:
    """Keel's record, mirror and execution records are not what a command sees under the
    state folder's path (a command may have made look-alike names there itself, in its own
    view: their content is what tells)."""
    assert '"push_url"' not in reads and "bare = true" not in reads, reads
    names = set(listing.split())
    assert not {"objects", "refs", "packed-refs", "meta.json", "run.sh"} & names, listing
    assert not [n for n in names if re.fullmatch(r"[0-9a-f]{16}", n)], listing


def _assert_probe_saw_nothing(
    output: str, ws: Path, host: Host, mark: str, others: list[Path]
) -> None:
    host.assert_untouched()
    for place in [Path("/"), Path("/tmp"), host.vault, *others]:
        assert not (place / f"written-{mark}").exists(), f"the command wrote into {place}"
    assert_clean([output], where="the next command's output")
    stdout, _ = streams(output)
    seen = sections(stdout)
    assert "done" in seen, f"the next command did not run normally:\n{output}"
    assert "root:" not in seen["reads"], "the host's /etc/shadow was readable"
    listed = set(seen["tmp"].split())
    assert not listed & HOST_ROOT_ENTRIES, f"the command's /tmp is the host's /: {listed}"
    # (names alone prove nothing: a command may have made look-alikes in its own /tmp)
    assert not {"drop", "vault"} & listed, f"the command's /tmp is a host folder: {listed}"
    _assert_no_state_visible(seen["reads"], seen["state"])
    state = state_of(ws)
    for folder in (state, state / "tmp", state / "home", state / "exec"):
        if os.path.lexists(folder):
            assert stat.S_ISDIR(os.lstat(folder).st_mode), f"{folder} is no longer Keel's folder"


def _made_by_command(ws: Path, host: Host) -> dict[str, str]:
    vault, state = shlex.quote(str(host.vault)), state_of(ws)
    # The first folder of the workspace's path under /tmp: a mount point in the command's /tmp.
    first = ws.parts[2] if ws.parts[1] == "tmp" else ws.parts[1]
    return {
        "keel-to-root": relink_sh(".keel", "/"),
        "keel-to-vault": relink_sh(".keel", vault),
        "keel-tmp-to-root": relink_sh(".keel/tmp", "/"),
        "keel-tmp-to-vault": relink_sh(".keel/tmp", vault),
        "keel-home-to-vault": relink_sh(".keel/home", vault),
        "keel-exec-to-vault": relink_sh(".keel/exec", vault),
        "keel-exec-to-root": relink_sh(".keel/exec", "/"),
        "home-contents": f'ln -s / "$HOME/root" && ln -s {vault} "$HOME/vault"',
        "tmp-mount-points": (
            f"mv /tmp/{first} /tmp/{first}.old 2>/dev/null; ln -sfn {vault} /tmp/{first}; "
            f"ln -sfn / /tmp/keel.db; ln -sfn {vault}/canary.txt /tmp/canary.txt; true"
        ),
        "state-mount-points": (
            f"mv {state.parent} /tmp/moved-$$ 2>/dev/null; ln -sfn {vault} {state.parent}; true"
        ),
        "state-from-inside": (
            f"ls -A {ws.parent} {state.parent} {state} 2>&1; "
            f"for d in tmp home exec mirror.git; do rm -rf {state}/$d 2>/dev/null; "
            f"ln -sfn {vault} {state}/$d 2>/dev/null; done; true"
        ),
    }


LINK_CASES = [
    "keel-to-root",
    "keel-to-vault",
    "keel-tmp-to-root",
    "keel-tmp-to-vault",
    "keel-home-to-vault",
    "keel-exec-to-vault",
    "keel-exec-to-root",
    "home-contents",
    "tmp-mount-points",
    "state-mount-points",
    "state-from-inside",
]


@pytest.mark.parametrize("case", LINK_CASES)
async def test_next_command_sees_none_of_the_host_when_a_command_left_symlinks(
    tmp_path: Path, host: Host, case: str
) -> None:
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    _, other = await new_workspace(tmp_path / "ws", str(origin), task="root-2")
    (other / "private.txt").write_text(f"task B's work {CANARY}\n")
    mark = os.urandom(6).hex()
    with _host_root_cleaned():
        plant = _made_by_command(ws, host)[case] + "; echo > .planted"
        planted = await run(workspaces.sandbox, ws, plant)
        # Old code lost track of a command whose records it moved: wait for its effect.
        assert wait_for(lambda: (ws / ".planted").exists()), planted.output
        assert_clean([planted.output], where="the planting command's output")
        probed = await run(workspaces.sandbox, ws, _probe(ws, host, mark))
        _assert_probe_saw_nothing(probed.output, ws, host, mark, [other])


def _shipped(host: Host) -> dict[str, dict[str, str]]:
    return {
        "tracked-keel-tmp-to-root": {".keel/tmp": "/"},
        "tracked-keel-to-root": {".keel": "/"},
        "tracked-keel-exec-to-vault": {".keel/exec": str(host.vault)},
        "tracked-keel-home-to-vault": {".keel/home": str(host.vault)},
        "tracked-keel-state-to-vault": {".keel-state": str(host.vault)},
    }


SHIPPED_CASES = [
    "tracked-keel-tmp-to-root",
    "tracked-keel-to-root",
    "tracked-keel-exec-to-vault",
    "tracked-keel-home-to-vault",
    "tracked-keel-state-to-vault",
]


@pytest.mark.parametrize("case", SHIPPED_CASES)
async def test_commands_see_none_of_the_host_when_the_repository_ships_keel_paths_as_symlinks(
    tmp_path: Path, host: Host, case: str
) -> None:
    """The repository alone, no model needed: Keel refuses the checkout with a clear message,
    or keeps its own files elsewhere; either way no command sees the host."""
    links = _shipped(host)[case]
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"}, symlinks=links)
    mark = os.urandom(6).hex()
    with _host_root_cleaned():
        plain = make_origin(tmp_path / "plain.git", {"README.md": "hello\n"})
        _, other = await new_workspace(tmp_path / "ws", str(plain), task="root-2")
        (other / "private.txt").write_text(f"task B's work {CANARY}\n")
        try:
            workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
        except KeelError as refused:  # refusing such a checkout is allowed, if it says why
            assert ".keel" in str(refused), refused
            host.assert_untouched()
            return
        first = await run(workspaces.sandbox, ws, "echo first")
        probed = await run(workspaces.sandbox, ws, _probe(ws, host, mark))
    assert_clean([first.output])
    _assert_probe_saw_nothing(probed.output, ws, host, mark, [other])


async def test_keel_state_unreachable_from_a_command(tmp_path: Path, host: Host) -> None:
    """The state folder beside the workspace (records, mirror, execution logs) is not in the
    sandbox; a command can neither list it nor plant anything Keel later reads."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    await run(workspaces.sandbox, ws, "echo a first command, so that its records exist")
    state = state_of(ws)
    command = "\n".join(
        [
            "echo @@list",
            f"ls -A {state} {state}/exec {state}/mirror.git 2>&1",
            "echo @@read",
            f"cat {state}/workspace.json {state}/mirror.git/config 2>&1",
            f"cat {state}/exec/*/meta.json 2>&1",
            "echo @@write",
            f"mkdir -p {state}/exec/forged && echo 0 > {state}/exec/forged/exit && echo wrote",
        ]
    )
    probed = await run(workspaces.sandbox, ws, command)
    seen = sections(streams(probed.output)[0])
    assert '"command"' not in seen["read"], seen["read"]
    assert "No such file" in seen["read"], seen["read"]
    _assert_no_state_visible(seen["read"], seen["list"])
    assert not (state / "exec" / "forged").exists()
    host.assert_untouched()


# -- pyvenv.cfg ------------------------------------------------------------------------------

PYVENV_HOMES = ["/proc/bin", "/", "/root/bin", "vault", "dotdot-vault", "root", "state"]


def _home(name: str, ws: Path, host: Host) -> str:
    return {
        "vault": f"{host.vault}/bin",
        "dotdot-vault": f"/usr/..{host.vault}/bin",
        "root": f"{ws.parent}/bin",
        "state": f"{ws.parent}/.keel-state/bin",
    }.get(name, name)


def _pyvenv_files(home: str) -> dict[str, str]:
    cfg = f"home = {home}\ninclude-system-site-packages = false\nversion = 3.11.7\n"
    return {f"{folder}/pyvenv.cfg": cfg for folder in ("tools", ".venv", "x")}


def _environ_probe(ws: Path, host: Host) -> str:
    """Every process's environment and argv the command can see, filtered down to what it must
    not see (the sentinel's tag is assembled at run time, so that the probe's own argv does not
    contain it)."""
    half = len(SENTINEL_TAG) // 2
    return "\n".join(
        [
            f"a={SENTINEL_TAG[:half]}; b={SENTINEL_TAG[half:]}",
            "echo @@environ",
            f"for f in /proc/[0-9]*/environ; do tr '\\000' '\\n' < $f; done | grep -a {LOOT_MARK}",
            "echo @@cmdline",
            "for f in /proc/[0-9]*/cmdline; do c=$(tr '\\000' ' ' < $f)",
            '  [[ $c == *"$a$b"* ]] && echo "$c"',
            "done",
            "echo @@files",
            f"cat {host.vault}/canary.txt {host.vault}/bin/python3",
            f"cat {ws.parent}/root-2/private.txt {state_of(ws)}/workspace.json",
            "echo @@root",
            "ls -A /root | head -50",
            "echo @@done",
        ]
    )


def _assert_environ_probe_clean(output: str, ws: Path) -> None:
    seen = sections(streams(output)[0])
    assert "done" in seen, f"the probe did not run:\n{output}"
    # /root holds, at most, the ancestors of the toolchains on PATH (.pyenv, say).
    shown = toolchain_roots(os.environ.get("PATH", ""), ws)
    allowed = {Path(r).relative_to("/root").parts[0] for r in shown if r.startswith("/root/")}
    assert set(seen["root"].split()) <= allowed, f"/root is shown: {seen['root']}"
    assert_clean([output], where="the command's output")
    assert not seen["environ"].strip(), f"another process's environment: {seen['environ']}"
    assert not seen["cmdline"].strip(), f"a host process is visible: {seen['cmdline']}"
    assert '"push_url"' not in seen["files"]


@pytest.mark.parametrize("how", ["shipped", "command"])
@pytest.mark.parametrize("home", PYVENV_HOMES)
async def test_pyvenv_cfg_mounts_nothing_of_the_host_when_its_home_names_a_host_folder(
    tmp_path: Path, host: Host, home: str, how: str
) -> None:
    ws_path = tmp_path / "ws" / "root-1"
    files = _pyvenv_files(_home(home, ws_path, host))
    shipped = files if how == "shipped" else {}
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n", **shipped})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    _, other = await new_workspace(tmp_path / "ws", str(origin), task="root-2")
    (other / "private.txt").write_text(f"task B's work {CANARY}\n")
    assert ws == ws_path
    if how == "command":
        wrote = await run(workspaces.sandbox, ws, write_files_sh(files) + " && echo wrote")
        assert "wrote" in wrote.output, wrote.output

    probed = await run(workspaces.sandbox, ws, _environ_probe(ws, host))

    _assert_environ_probe_clean(probed.output, ws)
    host.assert_untouched()


# -- secrets and the network -----------------------------------------------------------------


_FDS = "\n".join(
    [
        "echo @@fds",
        'for fd in /proc/[0-9]*/fd/*; do echo "$fd $(readlink $fd)"; done',
    ]
)


async def test_no_secret_of_keel_or_the_host_visible_to_a_command(
    tmp_path: Path, host: Host
) -> None:
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    command = "\n".join(
        [
            "echo @@env",
            "env",
            "echo @@self",
            "tr '\\000' '\\n' < /proc/self/environ",
            "echo @@one",
            "tr '\\000' '\\n' < /proc/1/environ",
            "echo @@parent",
            "tr '\\000' '\\n' < /proc/$PPID/environ",
        ]
    )
    # A descriptor Keel's process holds (its database, say) must not be inherited.
    held = os.open(host.vault / "keel.db", os.O_RDONLY)
    os.set_inheritable(held, True)
    try:
        shown = await run(workspaces.sandbox, ws, command + "\n" + _FDS)
        probed = await run(workspaces.sandbox, ws, _environ_probe(ws, host))
    finally:
        os.close(held)
    fds = sections(streams(shown.output)[0])["fds"]
    assert "keel.db" not in fds and "socket:" not in fds, fds
    seen = sections(streams(shown.output)[0])
    assert "PATH=" in seen["env"], shown.output  # the probe did print an environment
    for name, value in SECRETS.items():
        assert value not in shown.output, f"{name} is visible to a command"
        assert f"{name}=" not in shown.output, f"{name} is set inside the sandbox"
    _assert_environ_probe_clean(probed.output, ws)


async def test_network_and_keels_loopback_unreachable_from_a_command(tmp_path: Path) -> None:
    """Keel's API answers loopback without a token when none is set: a command must not
    reach loopback."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    with serving(Evil()) as evil:
        port = evil.server_address[1]
        command = (
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /api/tasks HTTP/1.0\\r\\n\\r\\n' >&3"
            " && cat <&3; echo reached=$?"
        )
        reached = await run(workspaces.sandbox, ws, command)
    assert "reached=" in reached.output, reached.output
    assert not evil.seen, "a sandboxed command reached a loopback server"


@pytest.mark.xfail(
    strict=True,
    reason="by design: an agent with network: on shares the host's network namespace, so its "
    "commands reach every loopback service (Keel's API asks them for the admin token only "
    "when one is set); network: allowlist is the setting for agents that read untrusted input "
    "(tests/security/test_egress.py)",
)
async def test_loopback_unreachable_even_when_the_agent_may_use_the_network(
    tmp_path: Path,
) -> None:
    """``network: on`` is for package downloads, not for Keel's own API (which asks
    no token on loopback unless one is set), its PostgreSQL on localhost or the metadata of
    the host."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    networked = replace(workspaces.sandbox, egress=Egress("on"))
    with serving(Evil()) as evil:
        port = evil.server_address[1]
        command = (
            f"exec 3<>/dev/tcp/127.0.0.1/{port} && printf 'GET /api/tasks HTTP/1.0\\r\\n\\r\\n' >&3"
            " && cat <&3; echo reached=$?"
        )
        reached = await run(networked, ws, command)
    assert "reached=" in reached.output, reached.output
    assert not evil.seen, "a sandboxed command reached a loopback server"


# -- capabilities ----------------------------------------------------------------------------

CAP_PROBE = "\n".join(
    [
        "echo @@status",
        "grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs):' /proc/self/status",
        "echo @@tries",
        "mknod /tmp/disk b 8 0 && echo MKNOD-OK",
        "mkdir -p /tmp/mnt && mount -t tmpfs none /tmp/mnt && echo MOUNT-OK",
        "unshare -Ur true && echo USERNS-OK",
        "chroot / true && echo CHROOT-OK",
        "echo @@done",
    ]
)


def _caps(text: str) -> dict[str, str]:
    return dict(re.findall(r"^(Cap\w+|NoNewPrivs):\s*(\S+)", text, re.M))


def _assert_unprivileged(output: str) -> None:
    seen = sections(streams(output)[0])
    assert "done" in seen, output
    caps = _caps(seen["status"])
    assert caps.get("CapEff") == "0" * 16, f"effective capabilities: {caps}"
    assert caps.get("CapPrm") == "0" * 16, f"permitted capabilities: {caps}"
    assert caps.get("CapAmb") == "0" * 16, f"ambient capabilities: {caps}"
    assert caps.get("CapBnd") == "0" * 16, f"bounding set: {caps}"
    assert caps.get("NoNewPrivs") == "1", f"no_new_privs not set: {caps}"
    for attempt in ("MKNOD-OK", "MOUNT-OK", "USERNS-OK", "CHROOT-OK"):
        assert attempt not in seen["tries"], f"{attempt}: {seen['tries']}"


async def test_commands_hold_no_capability_when_keel_runs_as_root(tmp_path: Path) -> None:
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    probed = await run(workspaces.sandbox, ws, CAP_PROBE)
    _assert_unprivileged(probed.output)


async def test_keels_own_git_in_the_workspace_holds_no_capability(
    tmp_path: Path, host: Host
) -> None:
    """A filter planted by a command runs wherever Keel's git_commit runs it: that may be in
    the sandbox, never with privileges (nor on the host)."""
    origin = make_origin(tmp_path / "origin.git", {"README.md": "hello\n"})
    workspaces, ws = await new_workspace(tmp_path / "ws", str(origin))
    p = Payloads(ws)
    config = git_config_sh([("filter.caps.clean", p("caps", "filter"))])
    plant = "\n".join(
        [
            write_files_sh({**p.files(host), ".gitattributes": "* filter=caps\n"}, p.executables()),
            config,
        ]
    )
    await run(workspaces.sandbox, ws, plant)
    await settle(WriteFile(), {"path": "a.txt", "content": "a\n"}, context(ws))
    await settle(GitCommit(), {"message": "a"}, context(ws))
    host.assert_untouched()
    loot = ws / "loot-caps.txt"
    if loot.exists():  # the filter ran (inside the sandbox): with what?
        caps = _caps(loot.read_text())
        assert caps.get("CapEff") == "0" * 16, caps
        assert caps.get("NoNewPrivs") == "1", caps


UNPRIVILEGED = 65534


async def test_commands_hold_no_capability_when_keel_runs_unprivileged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same sandbox, started by an unprivileged user (nobody) instead of root."""
    if os.geteuid() != 0:
        pytest.skip("switching to an unprivileged user needs root")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    base = Path(tempfile.mkdtemp(prefix="keel-nobody-", dir="/var/tmp"))
    try:
        base.chmod(0o755)
        ws = base / "workspaces" / "root-1"
        ws.mkdir(parents=True)
        # Toolchains root's user cannot reach (/root/...) stay out: PATH and the interpreter
        # are the system's, as they would be for a Keel installed for that user.
        monkeypatch.setenv("PATH", "/usr/local/bin:/usr/bin:/bin")
        monkeypatch.setattr(sys, "executable", "/usr/bin/python3")
        argv = Sandbox(mode="bwrap").wrap(["bash", "-c", CAP_PROBE], ws, "bwrap")
        for path in [base, *base.rglob("*")]:
            os.chown(path, UNPRIVILEGED, UNPRIVILEGED, follow_symlinks=False)
        drop = ["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}", "--clear-groups"]
        done = subprocess.run(
            [*drop, "--", *argv],
            cwd=ws,
            env={"PATH": "/usr/bin:/bin", "HOME": str(base)},
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0 and re.search(r"(?i)namespace|permission", done.stderr):
            pytest.skip(f"bubblewrap cannot start unprivileged here: {done.stderr.strip()}")
        report = (
            f"$ probe\n--- stdout (unprivileged) ---\n{done.stdout}\n--- stderr ---\n{done.stderr}"
        )
        _assert_unprivileged(report)
    finally:
        shutil.rmtree(base, ignore_errors=True)


async def test_workspaces_root_outside_tmp_behaves_the_same(host: Host) -> None:
    """The workspaces root under /var/tmp (not under the /tmp the sandbox replaces): the
    mount points of the workspace and its state are no longer inside the command's /tmp."""
    base = Path(tempfile.mkdtemp(prefix="keel-roots-", dir="/var/tmp"))
    try:
        origin = make_origin(base / "origin.git", {"README.md": "hello\n"})
        workspaces = Workspaces(base / "workspaces", "bwrap")
        _, ws = await new_workspace(base / "workspaces", str(origin))
        mark = os.urandom(6).hex()
        plant = (
            _made_by_command(ws, host)["keel-tmp-to-root"]
            + "; "
            + _made_by_command(ws, host)["state-from-inside"]
        )
        with _host_root_cleaned():
            await run(workspaces.sandbox, ws, plant)
            probed = await run(workspaces.sandbox, ws, _probe(ws, host, mark))
            _assert_probe_saw_nothing(probed.output, ws, host, mark, [])
    finally:
        shutil.rmtree(base, ignore_errors=True)
