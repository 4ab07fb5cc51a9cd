"""The command sandbox: bubblewrap confinement, no network, scrubbed env, resource limits.

These tests need bubblewrap. They skip without it on a developer machine, and fail without
it under CI (``CI`` set), where ``.ci/run`` installs it.
"""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runtime.errors import ConfigError
from runtime.tools.base import Completed
from runtime.workspace import sandbox as sandbox_module
from runtime.workspace.egress import Egress, EgressMode
from runtime.workspace.sandbox import Limits, Sandbox, SandboxMode
from runtime.workspace.state import WorkspaceState
from tests.host import loopback_listener, require_bwrap, run_to_end


@pytest.fixture(autouse=True)
def _needs_bwrap() -> None:
    require_bwrap()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    workspace = tmp_path / "workspaces" / "root-1"
    workspace.mkdir(parents=True)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    return workspace


async def run(sandbox: Sandbox, ws: Path, command: str) -> Completed:
    return await run_to_end(sandbox, ws, command, timeout_s=30)


async def test_writes_confined_when_sandboxed(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    elsewhere = Path("/var/tmp") / f"keel-sandbox-{uuid.uuid4().hex}"
    command = f"touch {outside}; touch {elsewhere}; touch /root/keel-x; echo ok > inside.txt"
    result = await run(Sandbox(mode="bwrap"), ws, command)
    assert "exit code" in result.output
    assert not outside.exists() and not elsewhere.exists()
    assert not Path("/root/keel-x").exists()
    assert (ws / "inside.txt").read_text() == "ok\n"


async def test_writes_land_outside_when_sandbox_is_none(ws: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    await run(Sandbox(mode="none"), ws, f"touch {outside}")
    assert outside.exists()


@pytest.fixture
def listener() -> Iterator[tuple[int, list[socket.socket]]]:
    with loopback_listener() as found:
        yield found


@pytest.mark.parametrize("mode", ["off", "on"])
async def test_loopback_unreachable_when_network_off(
    ws: Path, listener: tuple[int, list[socket.socket]], mode: EgressMode
) -> None:
    port, accepted = listener
    command = f"exec 3<>/dev/tcp/127.0.0.1/{port}"
    result = await run(Sandbox(mode="bwrap", egress=Egress(mode)), ws, command)
    await asyncio.sleep(0.3)
    assert ("exit code 0 " in result.output) is (mode == "on")
    assert len(accepted) == (1 if mode == "on" else 0)


async def test_secrets_scrubbed_when_command_runs(
    ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("KEEL_DATABASE_URL", "postgresql://keel:pw@db/keel")
    monkeypatch.setenv("SLACK_BOT_TOKEN", "xoxb-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-secret")
    sandbox = Sandbox(mode="bwrap", extra_env={"OPENAI_API_KEY": "sk-x", "FOO": "bar"})
    result = await run(sandbox, ws, "env")
    for secret in ("KEEL_", "SLACK_", "GITHUB_", "OPENAI_", "pw@db", "xoxb", "ghp-"):
        assert secret not in result.output
    assert "FOO=bar" in result.output
    assert f"HOME={WorkspaceState(ws).home}" in result.output


async def test_file_size_limited_when_limit_set(ws: Path) -> None:
    sandbox = Sandbox(mode="bwrap", limits=Limits(file_size_bytes=1_000_000))
    result = await run(sandbox, ws, "head -c 5000000 /dev/zero > big.bin")
    assert "exit code 0" not in result.output
    assert (ws / "big.bin").stat().st_size <= 1_000_000


async def test_exit_code_unforgeable_when_command_writes_its_record(ws: Path) -> None:
    records = WorkspaceState(ws).exec_root
    command = f'for d in {records}/*/ .keel/exec/*/; do echo "0" > "$d/exit"; done; exit 5'
    result = await run(Sandbox(mode="bwrap"), ws, command)
    assert "exit code 5 " in result.output


async def test_auto_uses_bwrap_when_installed() -> None:
    assert await Sandbox(mode="auto").isolation() == "bwrap"


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
async def test_refused_with_the_fix_when_bwrap_unusable(
    monkeypatch: pytest.MonkeyPatch, mode: SandboxMode
) -> None:
    """Fail closed: only an explicit ``none`` runs commands without bubblewrap."""
    monkeypatch.setattr(sandbox_module, "_bwrap_works", False)
    monkeypatch.setattr(sandbox_module, "_bwrap_problem", "bubblewrap failed to start")
    with pytest.raises(ConfigError) as refused:
        await Sandbox(mode=mode).isolation()
    assert "workspace.sandbox" in str(refused.value)
    assert "apt-get install bubblewrap" in str(refused.value)
    assert await Sandbox(mode="none").isolation() == "none"


async def test_virtualenv_under_tmp_usable_when_sandboxed(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A checkout under /tmp keeps its .venv there; the private /tmp must not hide it."""
    assert Path("/tmp") in tmp_path.parents  # the case this test is about
    venv = tmp_path / "checkout" / ".venv"
    subprocess.run(["python3", "-m", "venv", "--without-pip", str(venv)], check=True)
    site = next(venv.glob("lib/python*/site-packages"))
    (site / "keelprobe.py").write_text("WHERE = 'from the venv'\n")
    hidden = tmp_path / "host-secret.txt"
    hidden.write_text("host tmp\n")
    monkeypatch.setenv("PATH", f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}")
    command = f"python -c 'import keelprobe; print(keelprobe.WHERE)'; cat {hidden}"
    result = await run(Sandbox(mode="bwrap"), ws, command)
    assert "from the venv" in result.output
    assert "host tmp" not in result.output


@dataclass(frozen=True, slots=True)
class _ProfileSandbox(Sandbox):
    """bubblewrap with a host-style /etc/profile that resets PATH, as Debian's does."""

    profile: str = ""

    def _bwrap(self, workspace: Path, state: WorkspaceState) -> list[str]:
        own = Sandbox._bwrap(self, workspace, state)
        return [*own, "--ro-bind", self.profile, "/etc/profile"]


@pytest.mark.parametrize("mode", ["bwrap", "none"])
async def test_path_kept_when_shell_profiles_reset_it(
    tmp_path: Path, ws: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    tools = tmp_path / "keel-tools"
    tools.mkdir()
    (tools / "keeltool").write_text("#!/bin/sh\necho keeltool ran\n")
    (tools / "keeltool").chmod(0o755)
    monkeypatch.setenv("PATH", f"{tools}{os.pathsep}{os.environ['PATH']}")
    reset = "export PATH=/nonexistent\n"
    home = WorkspaceState(ws).ensure().home
    for name in (".bash_profile", ".profile"):
        (home / name).write_text(reset)
    profile = tmp_path / "profile"
    profile.write_text(reset)
    sandbox = (
        _ProfileSandbox(mode="bwrap", profile=str(profile))
        if mode == "bwrap"
        else (Sandbox(mode="none"))
    )
    result = await run(sandbox, ws, "keeltool; git --version")
    assert "keeltool ran" in result.output
    assert "git version" in result.output
    assert "exit code 0 " in result.output
