"""A small HTTP/1.1 load generator over keep-alive loopback connections.

httpx costs more CPU per request than the servers under test on a 2-core machine, so the
generator writes requests and reads responses on raw asyncio streams. It only connects to
127.0.0.1, sends a fixed list of requests, and gives up after a deadline: it always stops.
Latency is measured from when a request was due (open loop) or sent (closed loop) to the
last byte of its response.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from typing import Any

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class Request:
    path: str
    body: bytes
    headers: dict[str, str]


@dataclass(frozen=True, slots=True)
class Sample:
    index: int  # of the request in the list sent
    status: int  # 0: no response (connection failed or deadline)
    latency_s: float


@dataclass(frozen=True, slots=True)
class Run:
    samples: list[Sample]
    elapsed_s: float

    @property
    def ok(self) -> list[Sample]:
        return [s for s in self.samples if s.status == 200]

    @property
    def rate(self) -> float:
        return len(self.ok) / self.elapsed_s if self.elapsed_s else 0.0


def encode(request: Request, port: int) -> bytes:
    head = [f"POST {request.path} HTTP/1.1", f"Host: {HOST}:{port}",
            f"Content-Length: {len(request.body)}"]
    head += [f"{name}: {value}" for name, value in request.headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1") + request.body


class Connection:
    def __init__(self, port: int) -> None:
        self.port = port
        self._streams: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None

    async def send(self, request: Request) -> int:
        """The response status; reconnects once if the server closed the connection."""
        for attempt in (0, 1):
            try:
                return await self._exchange(encode(request, self.port))
            except (ConnectionError, asyncio.IncompleteReadError):
                self.close()
                if attempt:
                    raise
        raise AssertionError("unreachable")

    async def _exchange(self, raw: bytes) -> int:
        if self._streams is None:
            self._streams = await asyncio.open_connection(HOST, self.port)
        reader, writer = self._streams
        writer.write(raw)
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1").split("\r\n")
        status = int(head[0].split()[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in head[1:])}
        await reader.readexactly(int(fields.get("content-length", "0")))
        if fields.get("connection", "").lower() == "close":
            self.close()
        return status

    def close(self) -> None:
        if self._streams is not None:
            self._streams[1].close()
            self._streams = None


async def closed_loop(
    port: int, requests: Sequence[Request], connections: int, deadline_s: float
) -> Run:
    """Each connection sends its next request as soon as the previous one is answered."""
    samples: list[Sample] = []
    queue = list(reversed(list(enumerate(requests))))

    async def client() -> None:
        connection = Connection(port)
        try:
            while queue:
                index, request = queue.pop()
                sent = time.perf_counter()
                status = await _status(connection, request)
                samples.append(Sample(index, status, time.perf_counter() - sent))
        finally:
            connection.close()

    started = time.perf_counter()
    await _bounded([client() for _ in range(connections)], deadline_s)
    return Run(samples, time.perf_counter() - started)


async def open_loop(
    port: int, requests: Sequence[Request], rate_per_s: float, connections: int, deadline_s: float
) -> Run:
    """Request i is due at i / rate; latency counts any wait for a free connection too."""
    samples: list[Sample] = []
    idle: asyncio.Queue[Connection] = asyncio.Queue()
    for _ in range(connections):
        idle.put_nowait(Connection(port))
    started = time.perf_counter()

    async def one(index: int, request: Request) -> None:
        due = started + index / rate_per_s
        await asyncio.sleep(max(0.0, due - time.perf_counter()))
        connection = await idle.get()
        try:
            status = await _status(connection, request)
        finally:
            idle.put_nowait(connection)
        samples.append(Sample(index, status, time.perf_counter() - due))

    await _bounded([one(i, r) for i, r in enumerate(requests)], deadline_s)
    while not idle.empty():
        idle.get_nowait().close()
    return Run(samples, time.perf_counter() - started)


async def _status(connection: Connection, request: Request) -> int:
    try:
        return await connection.send(request)
    except (OSError, asyncio.IncompleteReadError, ValueError, IndexError):
        return 0


async def _bounded(jobs: list[Coroutine[Any, Any, None]], deadline_s: float) -> None:
    tasks = [asyncio.ensure_future(job) for job in jobs]
    _, pending = await asyncio.wait(tasks, timeout=deadline_s)
    for task in pending:
        task.cancel()
    await asyncio.gather(*pending, return_exceptions=True)
