"""Slack's side of Socket Mode: a websocket that sends envelopes and expects acknowledgements.

``apps.connections.open`` (the Web API emulator) hands out ``ws://`` URLs from ``SocketHub``.
On connect the hub says ``hello``; each envelope (``events_api``, ``interactive``) carries an
``envelope_id`` and stays unacknowledged until the client sends ``{"envelope_id": ...}``
back. An unacknowledged envelope is sent again, with ``retry_attempt`` counted up, when its
ack timeout passes or when a client (re)connects, as Slack does. ``disconnect`` tells the
client to fetch a new URL and reconnect.

It runs aiohttp's websocket server (aiohttp is already a dependency) on its own thread and
event loop, so tests and ``keel demo`` can drive it from any thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Callable, Coroutine
from dataclasses import dataclass, field
from typing import Any, Literal

from aiohttp import WSMsgType, web

EnvelopeType = Literal["events_api", "interactive", "slash_commands"]
_STARTUP_TIMEOUT_S = 10.0


@dataclass(slots=True)
class Envelope:
    envelope_id: str
    type: EnvelopeType
    payload: dict[str, Any]
    attempts: int = 0  # times sent
    sent_at: float = 0.0
    acked: bool = False


@dataclass(slots=True)
class _Hub:
    """State touched only on the hub's own loop."""

    envelopes: dict[str, Envelope] = field(default_factory=dict)
    sockets: list[web.WebSocketResponse] = field(default_factory=list)
    tickets: set[str] = field(default_factory=set)


class SocketHub:
    """The Socket Mode server; ``start()`` it, hand ``open_url`` to apps.connections.open."""

    def __init__(self, *, app_id: str = "A0KEELAPP1", ack_timeout_s: float = 3.0) -> None:
        self.app_id = app_id
        self.ack_timeout_s = ack_timeout_s
        # Acks to ignore, as if they were lost on the way: the envelope is redelivered.
        self.drop_acks = 0
        self.acks: list[str] = []
        self.connections = 0
        self._hub = _Hub()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._runner: web.AppRunner | None = None
        self._redelivery: asyncio.Task[None] | None = None
        self._port = 0
        self._lock = threading.Lock()

    # -- lifecycle (any thread) -------------------------------------------------------------

    def start(self) -> SocketHub:
        self._thread.start()
        self._call(self._start())
        return self

    def stop(self) -> None:
        self._call(self._stop())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=_STARTUP_TIMEOUT_S)

    def __enter__(self) -> SocketHub:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    # -- what the emulator and tests call (any thread) --------------------------------------

    def open_url(self) -> str:
        """A fresh ``wss``-style URL for one connection (apps.connections.open)."""
        ticket = uuid.uuid4().hex
        self._loop.call_soon_threadsafe(self._hub.tickets.add, ticket)
        return f"ws://127.0.0.1:{self._port}/link/?ticket={ticket}"

    def send(self, payload: dict[str, Any], type: EnvelopeType = "events_api") -> str:
        """Queue one envelope and send it to a connected client; returns its envelope_id."""
        envelope = Envelope(str(uuid.uuid4()), type, payload)
        self._call(self._deliver(envelope))
        return envelope.envelope_id

    def disconnect(self, reason: str = "refresh_requested") -> None:
        """Ask every connected client to reconnect, then close their sockets."""
        self._call(self._disconnect(reason))

    def is_acked(self, envelope_id: str) -> bool:
        envelope = self._hub.envelopes.get(envelope_id)
        return envelope is not None and envelope.acked

    def attempts(self, envelope_id: str) -> int:
        envelope = self._hub.envelopes.get(envelope_id)
        return envelope.attempts if envelope else 0

    def connected(self) -> int:
        return sum(1 for ws in list(self._hub.sockets) if not ws.closed)

    def wait(self, check: Callable[[], bool], timeout_s: float = 15.0) -> bool:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if check():
                return True
            time.sleep(0.02)
        return check()

    # -- on the hub's loop --------------------------------------------------------------------

    def _call(self, coroutine: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self._loop).result(_STARTUP_TIMEOUT_S)

    async def _start(self) -> None:
        app = web.Application()
        app.router.add_get("/link/", self._link)
        self._runner = web.AppRunner(app, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", 0)
        await site.start()
        server = site._server
        assert server is not None and server.sockets  # type: ignore[attr-defined]
        self._port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
        self._redelivery = self._loop.create_task(self._redeliver_forever())

    async def _stop(self) -> None:
        if self._redelivery is not None:
            self._redelivery.cancel()
        for ws in list(self._hub.sockets):
            await ws.close()
        if self._runner is not None:
            await self._runner.cleanup()

    async def _link(self, request: web.Request) -> web.StreamResponse:
        ticket = request.query.get("ticket", "")
        if ticket not in self._hub.tickets:
            return web.Response(status=401, text="invalid ticket")
        self._hub.tickets.discard(ticket)
        ws = web.WebSocketResponse(autoping=True)
        await ws.prepare(request)
        self.connections += 1
        self._hub.sockets.append(ws)
        await ws.send_str(json.dumps(self._hello()))
        for envelope in self._hub.envelopes.values():
            if not envelope.acked:
                await self._send_to(ws, envelope)
        try:
            async for message in ws:
                if message.type == WSMsgType.TEXT:
                    self._on_text(message.data)
        finally:
            self._hub.sockets.remove(ws)
        return ws

    def _hello(self) -> dict[str, Any]:
        return {
            "type": "hello",
            "num_connections": self.connected(),
            "debug_info": {"host": "applink-keel-emulated", "approximate_connection_time": 3600},
            "connection_info": {"app_id": self.app_id},
        }

    def _on_text(self, data: str) -> None:
        try:
            ack = json.loads(data)
        except ValueError:
            return
        envelope = self._hub.envelopes.get(str(ack.get("envelope_id")))
        if envelope is None:
            return
        with self._lock:
            dropped = self.drop_acks > 0
            self.drop_acks -= 1 if dropped else 0
        if dropped:
            return
        envelope.acked = True
        self.acks.append(envelope.envelope_id)

    async def _deliver(self, envelope: Envelope) -> None:
        self._hub.envelopes[envelope.envelope_id] = envelope
        live = [ws for ws in self._hub.sockets if not ws.closed]
        if live:
            await self._send_to(live[-1], envelope)

    async def _send_to(self, ws: web.WebSocketResponse, envelope: Envelope) -> None:
        message: dict[str, Any] = {
            "envelope_id": envelope.envelope_id,
            "type": envelope.type,
            "payload": envelope.payload,
            "accepts_response_payload": envelope.type != "events_api",
        }
        if envelope.type == "events_api":
            message |= {
                "retry_attempt": envelope.attempts,
                "retry_reason": "timeout" if envelope.attempts else "",
            }
        envelope.attempts += 1
        envelope.sent_at = time.monotonic()
        # If the socket went away the envelope stays unacked and is sent again.
        with contextlib.suppress(ConnectionError):
            await ws.send_str(json.dumps(message))

    async def _redeliver_forever(self) -> None:
        while True:
            await asyncio.sleep(0.1)
            live = [ws for ws in self._hub.sockets if not ws.closed]
            if not live:
                continue
            now = time.monotonic()
            for envelope in list(self._hub.envelopes.values()):
                overdue = envelope.attempts and now - envelope.sent_at > self.ack_timeout_s
                if not envelope.acked and overdue:
                    await self._send_to(live[-1], envelope)

    async def _disconnect(self, reason: str) -> None:
        notice = {"type": "disconnect", "reason": reason, "debug_info": {"host": "applink"}}
        for ws in list(self._hub.sockets):
            if not ws.closed:
                await ws.send_str(json.dumps(notice))
