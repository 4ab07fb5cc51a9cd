"""Hermetic stand-ins for the Python package index and the npm registry, for tests that run
``pip install`` and ``npm ci`` with no internet.

Everything is built by the test: a pure-Python wheel (``build_wheel``), an npm tarball
(``npm_tarball``) and the ``package-lock.json`` that pins it (``npm_lockfile``). A
``Registry`` serves them on loopback, as a PEP 503 simple index under ``/simple/`` and as an
npm registry at its root, and records every request with the ``Host`` it named, so a test can
assert the traffic happened and through which host name. ``isolated_env`` is the environment
to run the tools in, so that no configuration of the host's (an index, a proxy) takes part.

Requests may arrive through a forward proxy, whose request line carries an absolute URI
(``GET http://127.0.0.1:4000/simple/ HTTP/1.1``): ``Request.path`` is the path either way and
``Request.target`` is what the request line said. The index's links are relative and the npm
packument's tarball URLs name the ``Host`` the packument was asked of, so the registry answers
correctly under whatever host name it is reached by.
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import re
import tarfile
import threading
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, NamedTuple, cast
from urllib.parse import quote, unquote, urlsplit

_EPOCH = (1980, 1, 1, 0, 0, 0)  # the earliest a zip entry can say; wheels stay reproducible


def normalize(name: str) -> str:
    """A distribution name as PEP 503 spells it in the index's URLs."""
    return re.sub(r"[-_.]+", "-", name).lower()


def _wheel_hash(data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
    return f"sha256={digest.decode()}"


def build_wheel(dest: Path, name: str, version: str, module_source: str) -> Path:
    """A pure-Python wheel of distribution ``name`` in ``dest``, whose one package (``name``
    with ``-`` and ``.`` as ``_``) has ``module_source`` as its ``__init__.py``."""
    module = re.sub(r"[-.]+", "_", name)
    stem = f"{re.sub(r'[-_.]+', '_', name)}-{version}"
    dist_info = f"{stem}.dist-info"
    files = {
        f"{module}/__init__.py": module_source.encode(),
        f"{dist_info}/METADATA": (
            f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        ).encode(),
        f"{dist_info}/WHEEL": (
            b"Wheel-Version: 1.0\nGenerator: keel-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
        ),
    }
    record = "".join(f"{path},{_wheel_hash(data)},{len(data)}\n" for path, data in files.items())
    files[f"{dist_info}/RECORD"] = (record + f"{dist_info}/RECORD,,\n").encode()
    dest.mkdir(parents=True, exist_ok=True)
    wheel = dest / f"{stem}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as archive:
        for path, data in files.items():
            info = zipfile.ZipInfo(path, _EPOCH)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return wheel


def npm_tarball(dest: Path, name: str, version: str, index_js: str) -> tuple[Path, str]:
    """An npm package tarball of ``name`` in ``dest`` (``package/package.json`` and
    ``package/index.js``), and its ``sha512-<base64>`` integrity."""
    manifest = {"name": name, "version": version, "main": "index.js", "license": "MIT"}
    members = {
        "package/package.json": (json.dumps(manifest, indent=2) + "\n").encode(),
        "package/index.js": index_js.encode(),
    }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for path, data in members.items():
            info = tarfile.TarInfo(path)
            info.size, info.mode, info.mtime = len(data), 0o644, 499162500  # npm pack's epoch
            tar.addfile(info, io.BytesIO(data))
    packed = gzip.compress(raw.getvalue(), mtime=0)
    dest.mkdir(parents=True, exist_ok=True)
    tarball = dest / f"{name.rpartition('/')[2]}-{version}.tgz"
    tarball.write_bytes(packed)
    return tarball, _integrity(packed)


def _integrity(data: bytes) -> str:
    return "sha512-" + base64.b64encode(hashlib.sha512(data).digest()).decode()


def npm_manifest(name_of_project: str, deps: Mapping[str, tuple[str, str, str]]) -> dict[str, Any]:
    """The ``package.json`` of a project depending on exactly ``deps``' versions."""
    return {
        "name": name_of_project,
        "version": "1.0.0",
        "private": True,
        "dependencies": {dep: version for dep, (version, _, _) in sorted(deps.items())},
    }


def npm_lockfile(name_of_project: str, deps: Mapping[str, tuple[str, str, str]]) -> dict[str, Any]:
    """A lockfileVersion 3 ``package-lock.json`` that ``npm ci`` installs ``deps`` from, each
    ``(version, tarball URL, integrity)``, next to ``npm_manifest``'s ``package.json``."""
    root = {k: v for k, v in npm_manifest(name_of_project, deps).items() if k != "private"}
    packages: dict[str, Any] = {"": root}
    for dep, (version, resolved, integrity) in sorted(deps.items()):
        packages[f"node_modules/{dep}"] = {
            "version": version,
            "resolved": resolved,
            "integrity": integrity,
            "license": "MIT",
        }
    return {
        "name": name_of_project,
        "version": "1.0.0",
        "lockfileVersion": 3,
        "requires": True,
        "packages": packages,
    }


def isolated_env(home: Path) -> dict[str, str]:
    """This process's environment for a ``pip`` or ``npm`` that reads no configuration of the
    host's: no ``PIP_*``/``npm_config_*``/proxy variables and no config files (a developer's
    ``find-links`` or ``.npmrc`` would otherwise take part), ``home`` as ``HOME`` and npm's
    cache, and neither tool asking the registry about its own updates."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.upper().startswith(("PIP_", "NPM_CONFIG_")) and "proxy" not in k.lower()
    }
    return env | {
        "HOME": str(home),
        "PIP_CONFIG_FILE": os.devnull,  # pip then reads no config file at all
        "PIP_DISABLE_PIP_VERSION_CHECK": "1",
        "PIP_NO_CACHE_DIR": "1",
        "npm_config_userconfig": str(home / ".npmrc"),
        "npm_config_globalconfig": str(home / "global-npmrc"),
        "npm_config_cache": str(home / ".npm"),
        "npm_config_update_notifier": "false",  # else npm asks the registry for /npm
        "npm_config_audit": "false",
        "npm_config_fund": "false",
    }


class NpmDep(NamedTuple):
    """A published npm package as ``npm_lockfile`` wants it."""

    version: str
    resolved: str
    integrity: str


@dataclass(frozen=True, slots=True)
class Request:
    method: str
    path: str  # without the scheme and host a proxied request line carries
    host: str  # the Host header, "" without one
    target: str  # the request line's target as sent: a path, or an absolute URI via a proxy


@dataclass(frozen=True, slots=True)
class _NpmVersion:
    version: str
    tarball_path: str  # "/<name>/-/<base>-<version>.tgz"
    integrity: str
    shasum: str


class Registry:
    """PyPI's simple index and an npm registry on ``127.0.0.1``, port chosen by the system.

    ``add_wheel`` and ``add_npm`` build and publish into ``root``; publish before or while
    serving (``with Registry(tmp_path) as registry:``). ``requests`` lists every request
    received, in order.
    """

    def __init__(self, root: Path) -> None:
        self.root = root
        self.requests: list[Request] = []
        self._lock = threading.Lock()
        self._wheels: dict[str, list[Path]] = {}  # normalized name -> wheel files
        self._npm: dict[str, dict[str, _NpmVersion]] = {}  # name -> version -> published
        self._files: dict[str, Path] = {}  # URL path -> file served as it is
        self._server = _Server(self)
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def index_url(self) -> str:
        """What ``pip install --index-url`` wants."""
        return f"{self.url}/simple/"

    def paths(self) -> list[str]:
        with self._lock:
            return [r.path for r in self.requests]

    # -- publishing --------------------------------------------------------------------------

    def add_wheel(self, name: str, version: str, module_source: str) -> Path:
        return self.publish_wheel(
            name, build_wheel(self.root / "wheels", name, version, module_source)
        )

    def publish_wheel(self, name: str, wheel: Path) -> Path:
        with self._lock:
            self._wheels.setdefault(normalize(name), []).append(wheel)
            self._files[f"/files/{quote(wheel.name)}"] = wheel
        return wheel

    def add_npm(self, name: str, version: str, index_js: str) -> NpmDep:
        """Build and publish ``name@version``; what ``npm_lockfile`` wants of it."""
        tarball, integrity = npm_tarball(self.root / "npm" / name, name, version, index_js)
        path = f"/{name}/-/{tarball.name}"
        shasum = hashlib.sha1(tarball.read_bytes()).hexdigest()
        with self._lock:
            self._npm.setdefault(name, {})[version] = _NpmVersion(version, path, integrity, shasum)
            self._files[path] = tarball
        return NpmDep(version, self.url + path, integrity)

    # -- serving -----------------------------------------------------------------------------

    def __enter__(self) -> Registry:
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), name="registry", daemon=True
        )
        self._thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=10)
            self._thread = None
        self._server.server_close()

    def _answer(self, handler: _Handler) -> None:
        target = handler.path
        parts = urlsplit(target)
        path = parts.path or "/"
        host = handler.headers.get("Host", "")
        with self._lock:
            self.requests.append(Request(handler.command, path, host, target))
        if handler.command not in ("GET", "HEAD"):
            handler.close_connection = True  # its body is left unread
            return _send(handler, 405, b"", "text/plain")
        if path in ("/simple", "/simple/"):
            return _send(handler, 200, self._simple_root(), "text/html")
        if m := re.fullmatch(r"/simple/([^/]+)/?", path):
            page = self._simple_project(normalize(unquote(m.group(1))))
            if page is None:
                return _send(handler, 404, b"not found\n", "text/plain")
            return _send(handler, 200, page, "text/html")
        with self._lock:
            file = self._files.get(path)
        if file is not None:
            return _send(handler, 200, file.read_bytes(), "application/octet-stream")
        packument = self._packument(unquote(path[1:]), host or f"127.0.0.1:{self.port}")
        if packument is not None:
            return _send(handler, 200, packument, "application/json")
        return _send(handler, 404, b'{"error":"Not found"}', "application/json")

    def _simple_root(self) -> bytes:
        with self._lock:
            names = sorted(self._wheels)
        links = "".join(f'<a href="{escape(n)}/">{escape(n)}</a>\n' for n in names)
        return _html("Simple index", links)

    def _simple_project(self, name: str) -> bytes | None:
        with self._lock:
            wheels = list(self._wheels.get(name, ()))
        if not wheels:
            return None
        links = "".join(
            f'<a href="../../files/{quote(w.name)}#sha256='
            f'{hashlib.sha256(w.read_bytes()).hexdigest()}">{escape(w.name)}</a>\n'
            for w in wheels
        )
        return _html(f"Links for {name}", links)

    def _packument(self, name: str, host: str) -> bytes | None:
        with self._lock:
            versions = dict(self._npm.get(name, {}))
        if not versions:
            return None
        body = {
            "name": name,
            "dist-tags": {"latest": list(versions)[-1]},
            "versions": {
                v.version: {
                    "name": name,
                    "version": v.version,
                    "dist": {
                        "tarball": f"http://{host}{v.tarball_path}",
                        "integrity": v.integrity,
                        "shasum": v.shasum,
                    },
                }
                for v in versions.values()
            },
        }
        return json.dumps(body).encode()


def _html(title: str, body: str) -> bytes:
    return (
        f'<!DOCTYPE html>\n<html><head><meta name="pypi:repository-version" content="1.0">'
        f"<title>{escape(title)}</title></head><body>\n{body}</body></html>\n"
    ).encode()


def _send(handler: _Handler, status: int, body: bytes, content_type: str) -> None:
    handler.send_response(status)
    handler.send_header("Content-Type", content_type)
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    if handler.command != "HEAD":
        handler.wfile.write(body)


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, registry: Registry) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.registry = registry


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as pip and npm expect of an index

    def _any(self) -> None:
        cast(_Server, self.server).registry._answer(self)

    do_GET = do_HEAD = do_POST = do_PUT = _any

    def log_message(self, format: str, *args: Any) -> None:
        return None
