"""Fail closed, visibly (#37): ``keel config check`` and ``/readyz`` say when commands cannot
run sandboxed, and say so as a warning when ``workspace.sandbox: none`` runs them unsandboxed.

"Installed but cannot start" is a fake ``bwrap`` that exits 1, first on PATH (as under a
container runtime's default seccomp profile, where the real one fails its probe the same way).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from adapters.config import build_config
from adapters.emulators.server import serve
from adapters.web.app import create_app
from runtime.store.migrate import head_from_files
from runtime.workspace import sandbox as sandbox_module
from tests.host import require_bwrap

ROOT = Path(__file__).resolve().parents[2]
KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]


@pytest.fixture
def failing_bwrap(tmp_path: Path) -> Path:
    """A folder whose ``bwrap`` is installed but cannot start."""
    folder = tmp_path / "fakebin"
    folder.mkdir()
    fake = folder / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: setting up uid map: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    return folder


def _config_check(tmp_path: Path, sandbox: str, path: str) -> subprocess.CompletedProcess[str]:
    config = tmp_path / "app.yaml"
    config.write_text(f"workspace:\n  root: {tmp_path / 'ws'}\n  sandbox: {sandbox}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SLACK_", "GITHUB_", "KEEL_"))}
    env |= {"PYTHONPATH": str(ROOT), "PATH": path}
    return subprocess.run(
        [*KEEL, "config", "check", str(config)],
        env=env, cwd=tmp_path, capture_output=True, text=True, timeout=60,
    )


def test_config_check_fails_naming_the_fix_when_bwrap_cannot_start(
    tmp_path: Path, failing_bwrap: Path
) -> None:
    for mode in ("auto", "bwrap"):
        result = _config_check(tmp_path, mode, f"{failing_bwrap}:{os.environ['PATH']}")
        assert result.returncode == 2, result.stdout + result.stderr
        assert f"workspace.sandbox is {mode} and bubblewrap is installed but cannot start" in (
            result.stderr
        )
        assert "setting up uid map: Permission denied" in result.stderr  # what the probe said
        assert "user namespaces" in result.stderr
        assert "set workspace.sandbox: none" in result.stderr
        assert "Traceback" not in result.stderr


def test_config_check_fails_saying_install_it_when_bwrap_is_missing(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    result = _config_check(tmp_path, "auto", str(empty))
    assert result.returncode == 2, result.stdout + result.stderr
    assert "workspace.sandbox is auto and bubblewrap is not installed" in result.stderr
    assert "apt-get install bubblewrap" in result.stderr


def test_config_check_warns_but_passes_when_sandbox_is_none(
    tmp_path: Path, failing_bwrap: Path
) -> None:
    result = _config_check(tmp_path, "none", f"{failing_bwrap}:{os.environ['PATH']}")
    assert result.returncode == 0, result.stderr
    assert "warning: workspace.sandbox is none: commands run unsandboxed" in result.stderr
    assert "Keel's secrets" in result.stderr


def test_config_check_says_bwrap_works_when_it_does(tmp_path: Path) -> None:
    require_bwrap()
    result = _config_check(tmp_path, "auto", os.environ["PATH"])
    assert result.returncode == 0, result.stderr
    assert "sandbox: bubblewrap works (workspace.sandbox: auto)" in result.stdout
    assert "warning: workspace.sandbox" not in result.stderr


def _readyz(tmp_path: Path, sandbox: str) -> httpx.Response:
    tree = {
        "database": {"url": f"sqlite:///{tmp_path / 'keel.db'}"},
        "workspace": {"root": str(tmp_path / "ws"), "sandbox": sandbox},
    }
    with serve(create_app(build_config(tree, env={}), workers=False), lifespan="on") as server:
        return httpx.get(server.url + "/readyz")


def test_readyz_is_ready_with_a_warning_when_sandbox_is_none(tmp_path: Path) -> None:
    response = _readyz(tmp_path, "none")
    assert response.status_code == 200
    body = response.json()
    assert body["ready"] is True
    assert [w.startswith("workspace.sandbox is none: ") for w in body["warnings"]] == [True]


@pytest.mark.parametrize("mode", ["auto", "bwrap"])
def test_readyz_not_ready_when_bwrap_cannot_start(
    tmp_path: Path, failing_bwrap: Path, monkeypatch: pytest.MonkeyPatch, mode: str
) -> None:
    monkeypatch.setenv("PATH", f"{failing_bwrap}:{os.environ['PATH']}")
    monkeypatch.setattr(sandbox_module, "_bwrap_works", None)
    response = _readyz(tmp_path, mode)
    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False and body["error"] == "sandbox unavailable"
    assert "set workspace.sandbox: none" in body["detail"]


def test_readyz_ready_without_warnings_when_bwrap_works(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    require_bwrap()
    monkeypatch.setattr(sandbox_module, "_bwrap_works", None)  # probe the real one
    head = head_from_files()
    assert _readyz(tmp_path, "auto").json() == {
        "ready": True, "schema": {"database": head, "code": head}
    }
