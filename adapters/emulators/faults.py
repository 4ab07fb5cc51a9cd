"""Request recording and fault injection shared by the Slack and GitHub emulators.

A fault is armed on the emulator state with ``state.inject(target, fault, times=...)``.
``target`` matches a route name (Slack method such as ``"chat.postMessage"``, GitHub
operation id such as ``"pulls/create"``), ``"METHOD /path"``, a bare path, or ``"*"``.

Faults:
- ``"429"``: rate limited, with ``Retry-After``; nothing is performed.
- ``"500"``: server error; nothing is performed.
- ``"timeout"``: the handler sleeps ``delay_s`` (longer than the client's timeout) and then
  performs the request as usual, like a slow provider whose write lands late.
- ``"drop_response"``: the request is performed and committed, then the status line and
  headers are sent and the connection is closed before the body, so the client sees a
  transport error (truncated response) and cannot know the result. uvicorn logs
  "ASGI callable returned without completing response" for each drop; that line is the drop.
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import parse_qsl

FaultKind = Literal["429", "500", "timeout", "drop_response"]
_HIDDEN_HEADERS = frozenset({"authorization", "cookie"})
_SCOPE_KEY = "keel.emulator.gate"

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    """One request as the emulator received it; auth headers are left out."""

    method: str
    path: str
    query: dict[str, str]
    body: Any
    headers: dict[str, str]


@dataclass(slots=True)
class Fault:
    target: str
    kind: FaultKind
    remaining: int
    retry_after: int
    delay_s: float


@dataclass(slots=True)
class FaultPlan:
    """Armed faults, consumed first-armed first; safe to arm from the test thread."""

    faults: list[Fault] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def arm(self, fault: Fault) -> None:
        with self.lock:
            self.faults.append(fault)

    def take(self, candidates: tuple[str, ...]) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.remaining > 0 and (fault.target == "*" or fault.target in candidates):
                    fault.remaining -= 1
                    return fault
        return None


@dataclass(slots=True)
class EmulatorState:
    """What both emulators share: the request log and the armed faults."""

    requests: list[RecordedRequest] = field(default_factory=list)
    fault_plan: FaultPlan = field(default_factory=FaultPlan)

    def inject(
        self,
        target: str,
        fault: FaultKind,
        *,
        times: int = 1,
        retry_after: int = 1,
        delay_s: float = 2.0,
    ) -> None:
        """Arm ``fault`` for the next ``times`` requests matching ``target``."""
        self.fault_plan.arm(Fault(target, fault, times, retry_after, delay_s))

    def requests_to(self, method: str, path: str) -> list[RecordedRequest]:
        return [r for r in self.requests if r.method == method and r.path == path]


class FaultRaised(Exception):
    """Raised inside a handler for a 429/500 fault; the emulator renders its own body."""

    def __init__(self, fault: Fault) -> None:
        super().__init__(fault.kind)
        self.fault = fault


class _ResponseDropped(Exception):
    """Ends the ASGI call after the head was sent, so the server closes the connection."""


@dataclass(slots=True)
class Gate:
    """Per-request handle a handler uses to apply the fault armed for its route."""

    plan: FaultPlan
    method: str
    path: str
    drop: bool = False

    async def enter(self, route_name: str) -> None:
        fault = self.plan.take((route_name, f"{self.method} {self.path}", self.path))
        if fault is None:
            return
        match fault.kind:
            case "429" | "500":
                raise FaultRaised(fault)
            case "timeout":
                await asyncio.sleep(fault.delay_s)
            case "drop_response":
                self.drop = True


def gate_of(scope: Scope) -> Gate:
    gate: Gate = scope[_SCOPE_KEY]
    return gate


def _parse_body(raw: bytes, content_type: str) -> Any:
    if not raw:
        return None
    text = raw.decode("utf-8", errors="replace")
    if "json" in content_type:
        try:
            return json.loads(text)
        except ValueError:
            return text
    if "x-www-form-urlencoded" in content_type:
        return dict(parse_qsl(text, keep_blank_values=True))
    return text


def _record(state: EmulatorState, scope: Scope, raw: bytes) -> None:
    headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
    state.requests.append(
        RecordedRequest(
            method=scope["method"],
            path=scope["path"],
            query=dict(parse_qsl(scope.get("query_string", b"").decode("latin-1"))),
            body=_parse_body(raw, headers.get("content-type", "")),
            headers={k: v for k, v in headers.items() if k not in _HIDDEN_HEADERS},
        )
    )


async def _read_body(receive: Receive) -> bytes:
    chunks: list[bytes] = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


class RecordingMiddleware:
    """ASGI middleware of an emulator: record each request and carry out ``drop_response``."""

    def __init__(self, app: ASGIApp, state: EmulatorState) -> None:
        self.app = app
        self.state = state

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        raw = await _read_body(receive)
        _record(self.state, scope, raw)
        gate = Gate(self.state.fault_plan, scope["method"], scope["path"])
        scope[_SCOPE_KEY] = gate

        pending = [{"type": "http.request", "body": raw, "more_body": False}]

        async def replay() -> Message:
            return pending.pop() if pending else await receive()

        async def guarded_send(message: Message) -> None:
            if gate.drop and message["type"] == "http.response.body":
                raise _ResponseDropped
            await send(message)

        try:
            await self.app(scope, replay, guarded_send)
        except _ResponseDropped:
            return
