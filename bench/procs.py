"""Processes a benchmark starts: Keel (serve, worker) and servers, on free loopback ports.

Each is started with its output in a log file, waited for over HTTP or by its first line,
measured through /proc, and stopped by its own pid (SIGTERM, then SIGKILL after a grace).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import httpx

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def keel_command(*args: str) -> list[str]:
    """The ``keel`` console script of this virtualenv (what a person runs)."""
    script = Path(sys.executable).with_name("keel")
    if script.exists():
        return [str(script), *args]
    return [sys.executable, "-c", "from adapters.cli import main; main()", *args]


@dataclass
class Proc:
    process: subprocess.Popen[bytes]
    log_path: Path
    _log: IO[bytes]

    @property
    def pid(self) -> int:
        return self.process.pid

    def rss_mb(self) -> float:
        """Resident set size now, from /proc (Linux)."""
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
        raise RuntimeError(f"no VmRSS for pid {self.pid}")

    def cpu_s(self) -> float:
        """User plus system CPU time of all its threads so far, from /proc (Linux)."""
        # The command may hold spaces and parentheses: the fields follow its last ')'.
        fields = Path(f"/proc/{self.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def alive(self) -> bool:
        return self.process.poll() is None

    def tail(self, lines: int = 20) -> str:
        text = self.log_path.read_text(errors="replace").splitlines()
        return "\n".join(text[-lines:])

    def terminate(self) -> None:
        if self.alive():
            self.process.send_signal(signal.SIGTERM)

    def stop(self, grace_s: float = 15.0) -> None:
        if self.alive():
            self.terminate()
            try:
                self.process.wait(timeout=grace_s)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._log.close()


def stop_all(procs: list[Proc]) -> None:
    """SIGTERM to all at once, then wait for each: they shut down in parallel."""
    for proc in procs:
        proc.terminate()
    for proc in procs:
        proc.stop()


def start(command: list[str], log_path: Path, env: dict[str, str] | None = None) -> Proc:
    log = log_path.open("wb")
    process = subprocess.Popen(
        command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
    )
    return Proc(process, log_path, log)


def wait_http(proc: Proc, url: str, timeout_s: float = 60.0) -> None:
    """Until ``url`` answers 200; raises with the log's tail if the process dies first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not proc.alive():
            raise RuntimeError(f"{proc.log_path.name} exited:\n{proc.tail()}")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout_s:.0f} s:\n{proc.tail()}")


def wait_log(proc: Proc, needle: str, timeout_s: float = 60.0) -> None:
    """Until the process has written ``needle`` to its log."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if needle in proc.log_path.read_text(errors="replace"):
            return
        if not proc.alive():
            raise RuntimeError(f"{proc.log_path.name} exited:\n{proc.tail()}")
        time.sleep(0.1)
    raise RuntimeError(f"{proc.log_path.name} never said {needle!r}:\n{proc.tail()}")
