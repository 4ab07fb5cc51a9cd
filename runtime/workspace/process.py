"""The one place where Keel's workspace code runs a child process (git, probes, launchers).

Everything blocking about a subprocess is done here with asyncio, so callers
never touch ``subprocess`` themselves and a slow git never stalls the event loop. What a child
prints is kept only up to ``OUTPUT_LIMIT`` bytes a stream (its head and its tail): the child
may be sandboxed repository code, and Keel's memory is not its to fill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from runtime.errors import Retryable

OUTPUT_LIMIT = 8 * 2**20
_CHUNK = 64 * 1024


@dataclass(frozen=True, slots=True)
class ProcessResult:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0


async def run_process(
    argv: Sequence[str],
    *,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: bytes | None = None,
    timeout_s: float = 300.0,
) -> ProcessResult:
    """Run ``argv`` to completion and capture its output (bounded); a timeout kills it and is
    Retryable."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(_talk(proc, stdin), timeout_s)
    except TimeoutError:
        await _kill(proc)
        raise Retryable(f"{argv[0]} did not finish within {timeout_s:.0f}s") from None
    return ProcessResult(tuple(argv), _code(proc), out, err)


class Waiting:
    """A process started before it is needed, blocked reading its stdin until
    ``run_pipeline`` hands it its work: its start-up (a sandbox's, say) is then off the path
    of whoever waits for the result. Its stdout is a pipe whose read end becomes the stdin of
    the process it feeds. Started with ``subprocess`` rather than asyncio, so that it belongs
    to no event loop and may be used from whichever one runs later; talking to it holds no
    thread (its stdin is written without blocking, its end is seen through a pidfd)."""

    def __init__(self, argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str]) -> None:
        self.argv = tuple(argv)
        read_end, write_end = os.pipe()
        try:
            self.popen = subprocess.Popen(
                self.argv,
                cwd=cwd,
                env=dict(env),
                stdin=subprocess.PIPE,
                stdout=write_end,
                stderr=subprocess.PIPE,
            )
        except BaseException:
            os.close(read_end)
            raise
        finally:
            os.close(write_end)
        self._output: int | None = read_end

    @property
    def alive(self) -> bool:
        return self.popen.poll() is None

    def take_output(self) -> int:
        """The read end of its stdout, once: the caller hands it on and closes it."""
        fd = self._output
        if fd is None:
            raise RuntimeError("the output of this process was taken already")
        self._output = None
        return fd

    def discard(self) -> None:
        """Stop it: its stdin reaches its end, it and all below it are killed, and it is
        reaped aside."""
        if self._output is not None:
            os.close(self.take_output())
        for stream in (self.popen.stdin, self.popen.stderr):
            with contextlib.suppress(OSError):
                if stream is not None:
                    stream.close()
        self.kill()
        threading.Thread(target=self.popen.wait, daemon=True).start()

    def kill(self) -> None:
        """SIGKILL it and everything below it, while it has not been reaped (after that its
        pid may name another process)."""
        if self.popen.returncode is None:
            kill_below(self.popen.pid)

    async def talk(self, stdin: bytes) -> str:
        """Give it ``stdin`` (then its end), read its stderr (bounded) and wait for it."""
        popen = self.popen
        assert popen.stdin is not None and popen.stderr is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_CHUNK, loop=loop)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader, loop=loop), popen.stderr
        )
        try:
            _, err, _ = await asyncio.gather(
                _write_all(popen.stdin, stdin), _bounded(reader), _ended(popen)
            )
        finally:
            transport.close()
        return err


async def _write_all(stream: IO[bytes], data: bytes) -> None:
    """Write ``data`` to a pipe without blocking the loop, then close it; a reader that went
    away ends the writing."""
    fd = stream.fileno()
    os.set_blocking(fd, False)
    view = memoryview(data)
    try:
        while view:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                await _ready(fd, writable=True)
    except (BrokenPipeError, ConnectionResetError):
        pass
    finally:
        stream.close()


async def _ended(popen: subprocess.Popen[bytes]) -> int:
    """Wait for ``popen`` to end, on the loop (its pidfd turns readable), then reap it."""
    try:
        fd = os.pidfd_open(popen.pid)
    except ProcessLookupError:  # reaped already
        return popen.wait()
    try:
        if popen.poll() is None:
            await _ready(fd, writable=False)
    finally:
        os.close(fd)
    return popen.wait()


async def _ready(fd: int, *, writable: bool) -> None:
    loop = asyncio.get_running_loop()
    ready = loop.create_future()

    def wake() -> None:
        if not ready.done():
            ready.set_result(None)

    add, remove = (loop.add_writer, loop.remove_writer) if writable else (
        loop.add_reader,
        loop.remove_reader,
    )
    add(fd, wake)
    try:
        await ready
    finally:
        remove(fd)


async def run_pipeline(
    producer: Waiting,
    second: Sequence[str],
    *,
    second_env: Mapping[str, str],
    second_cwd: Path | None = None,
    stdin: bytes = b"",
    timeout_s: float = 300.0,
) -> tuple[ProcessResult, ProcessResult]:
    """``producer | second``, with no shell: bytes stream from one to the other without being
    held here, and each side keeps its own environment (the sandboxed side gets no secret).
    The producer was started already and gets ``stdin`` now."""
    output = producer.take_output()
    try:
        consumer = await asyncio.create_subprocess_exec(
            *second,
            cwd=second_cwd,
            env=dict(second_env),
            stdin=output,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    except BaseException:
        producer.discard()
        raise
    finally:
        os.close(output)
    try:
        first_err, (out, err) = await asyncio.wait_for(
            asyncio.gather(producer.talk(stdin), _talk(consumer, None)), timeout_s
        )
    except BaseException as e:  # a timeout, and also a cancellation: nothing is left running
        producer.kill()
        if consumer.returncode is None:
            consumer.kill()
        if isinstance(e, TimeoutError):
            await consumer.wait()
            raise Retryable(f"{producer.argv[0]} | {second[0]} ran past {timeout_s:.0f}s") from None
        raise
    code = producer.popen.returncode
    return (
        ProcessResult(producer.argv, code if code is not None else -1, "", first_err),
        ProcessResult(tuple(second), _code(consumer), out, err),
    )


async def _talk(proc: asyncio.subprocess.Process, stdin: bytes | None) -> tuple[str, str]:
    """Feed ``stdin`` and read both streams at once (bounded) until the process ends."""

    async def feed() -> None:
        if proc.stdin is None:
            return
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            if stdin:
                proc.stdin.write(stdin)
                await proc.stdin.drain()
            proc.stdin.close()

    _, out, err = await asyncio.gather(feed(), _bounded(proc.stdout), _bounded(proc.stderr))
    await proc.wait()
    return out, err


async def _bounded(stream: asyncio.StreamReader | None, limit: int = OUTPUT_LIMIT) -> str:
    """All of ``stream``, read to its end, keeping at most its first and last ``limit // 2``
    bytes around a note of what was left out."""
    if stream is None:
        return ""
    head, tail = bytearray(), bytearray()
    dropped = 0
    half = limit // 2
    while chunk := await stream.read(_CHUNK):
        room = half - len(head)
        if room > 0:
            head += chunk[:room]
            chunk = chunk[room:]
        tail += chunk
        if len(tail) > half:
            dropped += len(tail) - half
            del tail[: len(tail) - half]
    gap = f"\n[... {dropped} bytes left out ...]\n".encode() if dropped else b""
    return bytes(head + gap + tail).decode("utf-8", "replace")


async def _kill(proc: asyncio.subprocess.Process) -> None:
    if proc.returncode is None:  # not reaped yet: its pid is still its own
        kill_below(proc.pid)
    await proc.wait()


def kill_below(pid: int, *, group: bool = False) -> None:
    """SIGKILL ``pid`` and every process below it (and, with ``group``, its process group): a
    sandbox's processes are below bubblewrap, and a killed bubblewrap alone would leave them
    running.

    The tree is frozen first, and only then killed: a killed parent's children are reparented
    out of the tree, so none is killed before the tree is complete. Freezing is SIGSTOP to
    each process, then a wait until each one *is* stopped, then the tree is read again, until
    a read finds nothing new. The wait matters: SIGSTOP is only delivered when its target
    returns to user space, and since Linux 5.0 a fork under way when the signal arrives still
    completes, so a process sent SIGSTOP may add one more child before it stops. Once it shows
    as stopped, every child it made is in ``/proc``.
    """
    frozen: list[int] = []
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGSTOP)
    while new := [p for p in [pid, *descendants(pid)] if p not in frozen]:
        for target in new:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target, signal.SIGSTOP)
            frozen.append(target)
        _until_stopped(new)
    for target in frozen:
        with contextlib.suppress(ProcessLookupError):
            os.kill(target, signal.SIGKILL)
    if group:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)


_STOPPED = frozenset("TtZX")


def _until_stopped(pids: Sequence[int], within_s: float = 2.0) -> None:
    """Wait (briefly, bounded) until each of ``pids`` is stopped, a zombie or gone. A process
    in uninterruptible sleep may take longer than ``within_s``; then it is killed unfrozen,
    which is what happened before this wait existed."""
    deadline = time.monotonic() + within_s
    pause = 0.0005
    waiting = list(pids)
    while waiting and time.monotonic() < deadline:
        waiting = [p for p in waiting if _state(p) not in _STOPPED]
        if waiting:
            time.sleep(pause)
            pause = min(pause * 2, 0.02)


def _state(pid: int) -> str:
    """The one-letter state of ``pid`` ("X" once it is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return "X"
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[0] if fields else "X"


def descendants(pid: int) -> list[int]:
    """Every live process below ``pid``, parents before children, read from ``/proc``."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (parent := _parent_pid(entry)) is not None:
            children.setdefault(parent, []).append(int(entry.name))
    found: list[int] = []
    frontier = [pid]
    while frontier:
        below = children.get(frontier.pop(), [])
        found.extend(below)
        frontier.extend(below)
    return found


def _parent_pid(proc_entry: Path) -> int | None:
    try:
        stat = (proc_entry / "stat").read_text()
    except OSError:  # the process ended while we looked
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses, so split after it.
    fields = stat[stat.rfind(")") + 2 :].split()
    return int(fields[1]) if len(fields) > 1 else None


def _code(proc: asyncio.subprocess.Process) -> int:
    return proc.returncode if proc.returncode is not None else -1
