"""Keel's egress proxy: the host process through which an allowlisted command reaches the web.

One proxy per execution, started by the execution's wrapper (``runtime.workspace.commands``)
before the sandbox and killed after it, listening on ``egress.sock`` in the execution's record
folder, which the sandbox sees only as the socket bound at ``egress_bridge.SOCKET``. It takes
``http://`` requests with an absolute URI and ``CONNECT`` tunnels; it connects upstream to the
host and port it checked against the allowlist (``egress.Egress.allows``) and to nothing else:
a ``Host`` header does not redirect a request, a relative URI has no host and is refused
(400), and a URL of another scheme (``https://`` in a plain request, ``file:``, ``unix:``) is
refused too. A refused request gets 403 with a body naming the host, and its ``host:port`` is
appended, once, to the execution's refusal log. It reads only what Keel wrote: the allowlist
in the record folder; its working folder and ``$HOME`` are that folder too (proxy.py keeps
its data folders under ``$HOME``), never the workspace or the command's home.

The proxy is proxy.py (PyPI ``proxy.py``, BSD, no dependencies): it starts in about 0.2 s,
listens on a unix socket, and calls a plugin with the parsed host and port before it opens
the upstream connection, where raising ``HttpRequestRejected`` answers with any status and
body. pproxy filters by regular expressions over the host and drops a refused connection with
no answer, and no hook to record it; mitmproxy brings tens of dependencies, seconds of
start-up and TLS interception, which this needs none of. Only the policy (``egress``) and the
in-sandbox bridge (``egress_bridge``) are Keel's own.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import re
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from types import FrameType

import proxy
from proxy.http.exception import HttpRequestRejected
from proxy.http.parser import HttpParser
from proxy.http.proxy import HttpProxyBasePlugin

from runtime.workspace.egress import (
    REFUSED_FILE,
    REFUSED_LIMIT,
    SOCKET_FILE,
    Egress,
    read_allowlist,
)

_UNPRINTABLE = re.compile(r"[^A-Za-z0-9.:\[\]*_-]")


class RefusalLog:
    """``host:port`` a line, each once, at most ``REFUSED_LIMIT`` of them; written before the
    403 is sent, so it is complete when the command has seen its last refusal."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.seen: set[str] = set()

    def add(self, host: str, port: int) -> str:
        entry = f"{_UNPRINTABLE.sub('?', host)[:255] or '(no host)'}:{port}"
        if entry not in self.seen and len(self.seen) < REFUSED_LIMIT:
            self.seen.add(entry)
            flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW
            fd = os.open(self.path, flags, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(entry + "\n")
        return entry


def allowlist_plugin(policy: Egress, log: RefusalLog) -> type[HttpProxyBasePlugin]:
    """The proxy.py plugin that lets through only what ``policy`` allows."""

    class AllowlistPlugin(HttpProxyBasePlugin):
        def before_upstream_connection(self, request: HttpParser) -> HttpParser | None:
            host = request.host.decode("ascii", "replace") if request.host else ""
            port = request.port or 0
            if _plain_http_or_tunnel(request) and policy.allows(host, port):
                return request
            entry = log.add(host, port)
            body = f"Keel's egress proxy refused {entry}: it is not in this agent's allowlist\n"
            raise HttpRequestRejected(
                status_code=403,
                reason=b"Forbidden",
                headers={b"Content-Type": b"text/plain; charset=utf-8"},
                body=body.encode(),
            )

    return AllowlistPlugin


def _plain_http_or_tunnel(request: HttpParser) -> bool:
    if request.is_https_tunnel:
        return True
    url = request._url  # proxy.py keeps the parsed request line here
    return url is not None and url.scheme == b"http" and url.hostname is not None


def main(argv: Sequence[str]) -> None:
    """Serve the execution recorded in ``argv[0]`` until killed or its wrapper is gone."""
    folder = Path(argv[0])
    os.chdir(folder)
    plugin = allowlist_plugin(read_allowlist(folder), RefusalLog(folder / REFUSED_FILE))
    data = folder / "proxy-data"
    flags = ["--data-dir", str(data), "--ca-cert-dir", str(data / "certs")]
    flags += ["--cache-dir", str(data / "cache"), "--log-level", "WARNING"]
    # proxy.py's acceptor processes inherit the plugin, a local class, which cannot be pickled
    multiprocessing.set_start_method("fork", force=True)
    with proxy.Proxy(
        input_args=flags,
        plugins=[plugin],
        unix_socket_path=SOCKET_FILE,  # relative: a unix socket's path has a length limit
        num_acceptors=1,
        threadless=True,
    ):
        signal.signal(signal.SIGTERM, _exit_now)
        wrapper = os.getppid()
        while os.getppid() == wrapper:
            time.sleep(0.5)
        _exit_now()


def _exit_now(_signum: int = 0, _frame: FrameType | None = None) -> None:
    """Stop at once: proxy.py's own shutdown waits up to a second for its acceptors."""
    for child in multiprocessing.active_children():
        child.kill()
    with contextlib.suppress(OSError):
        os.unlink(SOCKET_FILE)
    sys.stdout.flush()
    os._exit(0)
