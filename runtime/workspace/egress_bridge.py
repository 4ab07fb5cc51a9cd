"""The sandbox's half of allowlisted egress: a loopback port that leads to Keel's proxy.

A command with an allowlist runs in an empty network namespace. The proxy's unix socket is
bound into it at ``SOCKET``, but the tools a command runs (pip, npm, cargo, go, git, curl)
speak to a proxy over TCP only; so a bridge inside the sandbox listens on ``127.0.0.1:PORT``
of the sandbox's own loopback and pipes each connection to that socket, and the command gets
``http://127.0.0.1:PORT`` as its proxy. The bridge adds no way out: whatever it carries, the
proxy on the other end decides.

The bridge is the first program of the sandbox, run by Keel's own interpreter (shown in every
sandbox, see ``toolchain_roots``): it binds its port, forks its serving half and then *becomes*
the command (``exec``). So the port listens before the command's first instruction (no race),
the command is still the PID namespace's first process (``--as-pid-1``), and the bridge, left
behind in that namespace, is killed by the kernel the moment the command ends.

Written by hand: a pipe between two sockets is a few lines of the standard library, and
socat (not installed everywhere) could neither be relied on nor listen before the command
starts without a wait loop.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

SOCKET = "/run/keel-egress.sock"  # on bubblewrap's own root: nowhere the command writes
PORT = 3128

_BRIDGE = """
import os, socket, sys, threading
path, port = sys.argv[1], int(sys.argv[2])
server = socket.create_server(("127.0.0.1", port), backlog=128)
def pipe(src, dst):
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    try:
        dst.shutdown(socket.SHUT_WR)
    except OSError:
        pass
def serve(client):
    with client, socket.socket(socket.AF_UNIX) as upstream:
        try:
            upstream.connect(path)
        except OSError:
            return
        other = threading.Thread(target=pipe, args=(client, upstream), daemon=True)
        other.start()
        pipe(upstream, client)
        other.join()
if os.fork() == 0:
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    while True:
        client = server.accept()[0]
        threading.Thread(target=serve, args=(client,), daemon=True).start()
server.close()
os.execvp(sys.argv[3], sys.argv[3:])
"""


def bridged(argv: Sequence[str]) -> list[str]:
    """``argv`` started behind the bridge, once its port listens."""
    return [sys.executable, "-I", "-S", "-c", _BRIDGE, SOCKET, str(PORT), *argv]


def proxy_env() -> dict[str, str]:
    """The variables by which the command's tools find the proxy; none is exempt from it."""
    url = f"http://127.0.0.1:{PORT}"
    names = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "npm_config_proxy",
             "npm_config_https_proxy")
    found = {name: url for name in names}
    found |= {name.lower(): url for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY")}
    return found | {"NO_PROXY": "", "no_proxy": ""}
