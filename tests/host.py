"""What a test needs from the host (bubblewrap), and commands run to the end on it."""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from runtime.tools.base import Completed, Tool, ToolContext
from runtime.tools.devbox import RunCommand
from runtime.workspace.sandbox import Sandbox


@contextmanager
def loopback_listener() -> Iterator[tuple[int, list[socket.socket]]]:
    """A TCP server on a free loopback port that accepts every connection in a thread: the port
    and the connections accepted so far, all closed afterwards."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.settimeout(0.2)  # the accept loop checks for the stop this often
    accepted: list[socket.socket] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except TimeoutError:
                continue

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(server.getsockname()[1]), accepted
    finally:
        stop.set()
        thread.join()
        for conn in accepted:
            conn.close()
        server.close()


def require_bwrap() -> None:
    """Skip without bubblewrap, except under CI, where its absence is a failure."""
    if shutil.which("bwrap") is None:
        if os.environ.get("CI"):
            pytest.fail("bubblewrap is missing under CI; .ci/run should have installed it")
        pytest.skip("bubblewrap is not installed")


async def run_to_end(sandbox: Sandbox, ws: Path, command: str, timeout_s: float = 60) -> Completed:
    """Run ``command`` with the devbox tool in ``ws`` and poll until it reports."""
    return await run_tool_to_end(RunCommand(sandbox), ws, command, timeout_s)


async def run_tool_to_end(tool: Tool, ws: Path, command: str, timeout_s: float = 60) -> Completed:
    """Run ``command`` with a ``run_command`` tool in ``ws`` and poll until it reports."""
    ctx = ToolContext("task-1", ws.name, f"call-{uuid.uuid4().hex}", workspace=ws)
    started = await tool.start({"command": command, "timeout_s": timeout_s}, ctx)
    assert not isinstance(started, Completed), started
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        result = await tool.poll(started.handle, ctx)
        if isinstance(result, Completed):
            return result
        await asyncio.sleep(0.05)
    raise AssertionError("command did not finish")
