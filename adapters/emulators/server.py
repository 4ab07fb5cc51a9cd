"""Running an ASGI app under uvicorn on a free loopback port, in a background thread.

The server has its own event loop in its own thread, so synchronous clients (slack_sdk's
WebClient, PyGithub) and the caller's event loop can both talk to it over a real socket.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal

import uvicorn

_STARTUP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class RunningServer:
    """A live server; ``url`` has no trailing slash."""

    url: str
    server: uvicorn.Server
    thread: threading.Thread

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=_STARTUP_TIMEOUT_S)

    def __enter__(self) -> RunningServer:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()


def serve(
    app: Any, host: str = "127.0.0.1", port: int = 0, *, lifespan: Literal["on", "off"] = "off"
) -> RunningServer:
    """Start ``app`` and return once it accepts connections (port 0 picks a free port).

    ``lifespan="on"`` runs the app's startup (and shutdown) around serving, as Keel needs.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    bound_port = sock.getsockname()[1]
    config = uvicorn.Config(
        app, log_level="warning", lifespan=lifespan, timeout_graceful_shutdown=5, access_log=False
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(
        target=server.run, kwargs={"sockets": [sock]}, name=f"emulator:{bound_port}", daemon=True
    )
    thread.start()
    _wait_until_answering(server, host, bound_port)
    return RunningServer(url=f"http://{host}:{bound_port}", server=server, thread=thread)


def _wait_until_answering(server: uvicorn.Server, host: str, port: int) -> None:
    deadline = time.monotonic() + _STARTUP_TIMEOUT_S
    while time.monotonic() < deadline:
        if server.started:
            with socket.create_connection((host, port), timeout=1.0):
                return
        time.sleep(0.01)
    raise RuntimeError(f"emulator on {host}:{port} did not start")
