"""The one place where Keel's workspace code runs a child process (git, probes, launchers).

Everything blocking about a subprocess is done here with asyncio, so callers never touch
``subprocess`` themselves and a slow git never stalls the event loop. What a child prints is
kept only up to ``OUTPUT_LIMIT`` bytes a stream (its head and its tail): the child may be
sandboxed repository code, and Keel's memory is not its to fill.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

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


async def run_pipeline(
    first: Sequence[str],
    second: Sequence[str],
    *,
    first_env: Mapping[str, str],
    second_env: Mapping[str, str],
    cwd: Path | None = None,
    second_cwd: Path | None = None,
    stdin: bytes | None = None,
    timeout_s: float = 300.0,
) -> tuple[ProcessResult, ProcessResult]:
    """``first | second``, with no shell: bytes stream from one to the other without being
    held here, and each side keeps its own environment (the sandboxed side gets no secret)."""
    read_end, write_end = os.pipe()
    try:
        producer = await asyncio.create_subprocess_exec(
            *first,
            cwd=cwd,
            env=dict(first_env),
            stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
            stdout=write_end,
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            consumer = await asyncio.create_subprocess_exec(
                *second,
                cwd=second_cwd,
                env=dict(second_env),
                stdin=read_end,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        except BaseException:
            await _kill(producer)
            raise
    finally:
        os.close(read_end)
        os.close(write_end)
    try:
        (_, first_err), (out, err) = await asyncio.wait_for(
            asyncio.gather(_talk(producer, stdin), _talk(consumer, None)), timeout_s
        )
    except TimeoutError:
        for proc in (producer, consumer):
            await _kill(proc)
        raise Retryable(f"{first[0]} | {second[0]} ran past {timeout_s:.0f}s") from None
    return (
        ProcessResult(tuple(first), _code(producer), "", first_err),
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
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    await proc.wait()


def _code(proc: asyncio.subprocess.Process) -> int:
    return proc.returncode if proc.returncode is not None else -1
