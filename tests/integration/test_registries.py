"""The package-registry stand-ins (tests/registries.py) work with the real tools: ``pip``
installs a built wheel from the simple index, and ``npm ci`` installs a built tarball pinned
by a generated ``package-lock.json``, with no internet. Smoke tests of the fixtures: the tools
run on the host, unsandboxed."""

from __future__ import annotations

import base64
import hashlib
import http.client
import json
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.registries import (
    Registry,
    build_wheel,
    isolated_env,
    npm_lockfile,
    npm_manifest,
)

needs_npm = pytest.mark.skipif(
    shutil.which("npm") is None or shutil.which("node") is None, reason="npm/node not installed"
)


def _run(argv: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, f"{argv}:\n{done.stdout}\n{done.stderr}"
    return done


def test_pip_installs_the_wheel_from_the_simple_index(tmp_path: Path) -> None:
    env = isolated_env(tmp_path / "home")
    venv = tmp_path / "venv"
    # No pip of the venv's own: the test's pip installs into it (--python), seconds faster.
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], tmp_path, env)
    with Registry(tmp_path / "registry") as registry:
        registry.add_wheel("keel-probe", "1.2.3", "VALUE = 'from the stand-in'\n")
        _run(
            [
                sys.executable, "-m", "pip", "--python", str(venv / "bin" / "python"),
                "install", "--no-cache-dir", "--disable-pip-version-check",
                "--index-url", registry.index_url, "--trusted-host", "127.0.0.1",
                "keel-probe",
            ],
            tmp_path, env,
        )  # fmt: skip
        paths = registry.paths()
    imported = _run(
        [str(venv / "bin" / "python"), "-c", "import keel_probe; print(keel_probe.VALUE)"],
        tmp_path, env,
    )  # fmt: skip
    assert imported.stdout == "from the stand-in\n"
    assert paths == ["/simple/keel-probe/", "/files/keel_probe-1.2.3-py3-none-any.whl"]
    assert {r.host for r in registry.requests} == {f"127.0.0.1:{registry.port}"}


@needs_npm
def test_npm_ci_installs_the_locked_tarball(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    with Registry(tmp_path / "registry") as registry:
        dep = registry.add_npm("keel-probe", "1.2.3", "module.exports = 'from the stand-in';\n")
        deps = {"keel-probe": dep}
        (project / "package.json").write_text(json.dumps(npm_manifest("project", deps)))
        (project / "package-lock.json").write_text(json.dumps(npm_lockfile("project", deps)))
        env = isolated_env(home) | {"npm_config_registry": registry.url + "/"}
        _run(["npm", "ci", "--no-audit", "--no-fund"], project, env)
        paths = registry.paths()
    assert (
        json.loads((project / "node_modules/keel-probe/package.json").read_text())["version"]
        == "1.2.3"
    )
    required = _run(["node", "-e", "console.log(require('keel-probe'))"], project, env)
    assert required.stdout == "from the stand-in\n"
    # The lock's resolved URL and integrity suffice: npm asks for the tarball and nothing else.
    assert paths == ["/keel-probe/-/keel-probe-1.2.3.tgz"]


@needs_npm
def test_npm_install_resolves_through_the_packument(tmp_path: Path) -> None:
    home, project = tmp_path / "home", tmp_path / "project"
    project.mkdir()
    (project / "package.json").write_text(json.dumps({"name": "project", "version": "1.0.0"}))
    with Registry(tmp_path / "registry") as registry:
        registry.add_npm("keel-probe", "1.0.0", "module.exports = 'old';\n")
        registry.add_npm("keel-probe", "1.2.3", "module.exports = 'latest';\n")
        env = isolated_env(home) | {"npm_config_registry": registry.url + "/"}
        _run(["npm", "install", "--no-audit", "--no-fund", "keel-probe"], project, env)
        paths = registry.paths()
    required = _run(["node", "-e", "console.log(require('keel-probe'))"], project, env)
    assert required.stdout == "latest\n"
    assert paths == ["/keel-probe", "/keel-probe/-/keel-probe-1.2.3.tgz"]
    lock = json.loads((project / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/keel-probe"]["integrity"].startswith("sha512-")


def test_a_proxied_request_is_served_and_recorded_with_its_host(tmp_path: Path) -> None:
    """What a forward proxy sends: an absolute URI, and the Host the client named."""
    with Registry(tmp_path / "registry") as registry:
        wheel = registry.add_wheel("Keel.Probe", "0.1", "")
        conn = http.client.HTTPConnection("127.0.0.1", registry.port, timeout=10)
        conn.request("GET", f"{registry.url}/simple/keel-probe/", headers={"Host": "pypi.test"})
        response = conn.getresponse()
        page = response.read().decode()
        conn.request("GET", "/simple/absent/")
        missing = conn.getresponse()
        missing.read()
        conn.close()
    assert response.status == 200
    assert f'href="../../files/{wheel.name}#sha256=' in page
    assert missing.status == 404
    assert [(r.path, r.host, r.target) for r in registry.requests] == [
        ("/simple/keel-probe/", "pypi.test", f"{registry.url}/simple/keel-probe/"),
        ("/simple/absent/", f"127.0.0.1:{registry.port}", "/simple/absent/"),
    ]


def test_a_wheel_records_each_file_it_holds(tmp_path: Path) -> None:
    wheel = build_wheel(tmp_path, "keel-probe", "1.2.3", "VALUE = 1\n")
    assert wheel.name == "keel_probe-1.2.3-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as archive:
        record = archive.read("keel_probe-1.2.3.dist-info/RECORD").decode().splitlines()
        for line in record:
            path, digest, size = line.rsplit(",", 2)
            if path.endswith("RECORD"):
                assert (digest, size) == ("", "")
                continue
            data = archive.read(path)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            assert (digest, size) == (f"sha256={expected.decode()}", str(len(data)))
        assert sorted(line.split(",")[0] for line in record) == sorted(archive.namelist())
