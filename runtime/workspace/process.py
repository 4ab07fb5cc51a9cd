"""The one place where Keel's workspace code runs a child process (git, probes, launchers).

Everything blocking about a subprocess is done here with asyncio, so callers never touch
``subprocess`` themselves and a slow git never stalls the event loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from runtime.errors import Retryable


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
    """Run ``argv`` to completion and capture its output; a timeout kills it and is Retryable."""
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=cwd,
        env=dict(env) if env is not None else None,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(proc.communicate(stdin), timeout_s)
    except TimeoutError:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()
        raise Retryable(f"{argv[0]} did not finish within {timeout_s:.0f}s") from None
    return ProcessResult(
        argv=tuple(argv),
        returncode=proc.returncode if proc.returncode is not None else -1,
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
    )


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
        consumer = await asyncio.create_subprocess_exec(
            *second,
            cwd=second_cwd,
            env=dict(second_env),
            stdin=read_end,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
    finally:
        os.close(read_end)
        os.close(write_end)
    try:
        (_, first_err), (out, err) = await asyncio.wait_for(
            asyncio.gather(producer.communicate(stdin), consumer.communicate()), timeout_s
        )
    except TimeoutError:
        for proc in (producer, consumer):
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            await proc.wait()
        raise Retryable(f"{first[0]} | {second[0]} ran past {timeout_s:.0f}s") from None
    return (
        ProcessResult(tuple(first), _code(producer), "", first_err.decode("utf-8", "replace")),
        ProcessResult(
            tuple(second),
            _code(consumer),
            out.decode("utf-8", "replace"),
            err.decode("utf-8", "replace"),
        ),
    )


def _code(proc: asyncio.subprocess.Process) -> int:
    return proc.returncode if proc.returncode is not None else -1
