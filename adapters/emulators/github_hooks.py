"""The GitHub emulator's App webhook: deliveries sent to Keel, listed and redelivered.

``HookLog.send`` delivers an event as GitHub would (signed, with a fresh GUID) and records
the attempt with its status code, 0 when Keel could not be reached. GitHub lists them under
``GET /app/hook/deliveries`` (newest first, cursor pagination) and redelivers one on
``POST /app/hook/deliveries/{id}/attempts``: the same GUID and body, a new delivery id.
GitHub never redelivers by itself, and neither does the emulator.
"""

from __future__ import annotations

import asyncio
import itertools
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx

from adapters.emulators.webhooks import sign_github


@dataclass(slots=True)
class HookDelivery:
    delivery_id: int
    guid: str
    event: str
    action: str | None
    payload: dict[str, Any]
    delivered_at: float
    status_code: int
    redelivery: bool = False
    installation_id: int | None = None

    def json(self) -> dict[str, Any]:
        delivered = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.delivered_at))
        ok = 200 <= self.status_code < 300
        return {
            "id": self.delivery_id,
            "guid": self.guid,
            "delivered_at": delivered,
            "redelivery": self.redelivery,
            "duration": 0.05,
            "status": "OK" if ok else "Invalid HTTP Response: " + str(self.status_code),
            "status_code": self.status_code,
            "event": self.event,
            "action": self.action,
            "installation_id": self.installation_id,
            "repository_id": None,
            "throttled_at": None,
        }


@dataclass(slots=True)
class HookLog:
    """Where the App's webhook points, and every delivery attempt made to it."""

    url: str | None = None
    secret: str = "webhook-secret"
    deliveries: list[HookDelivery] = field(default_factory=list)
    redelivery_requests: list[int] = field(default_factory=list)
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(90_001))
    _pending: set[asyncio.Task[HookDelivery]] = field(default_factory=set)

    async def send(
        self,
        event: str,
        payload: dict[str, Any],
        *,
        guid: str | None = None,
        redelivery: bool = False,
        delivered_at: float | None = None,
    ) -> HookDelivery:
        guid = guid or str(uuid.uuid4())
        signed = sign_github(event, payload, self.secret, delivery_id=guid)
        status = 0
        if self.url is not None:
            try:
                async with httpx.AsyncClient(timeout=10.0) as client:
                    answer = await client.post(
                        self.url, content=signed.body, headers=signed.headers
                    )
                status = answer.status_code
            except httpx.HTTPError:
                status = 0
        installation = payload.get("installation")
        delivery = HookDelivery(
            next(self._ids),
            guid,
            event,
            payload.get("action") if isinstance(payload.get("action"), str) else None,
            payload,
            delivered_at if delivered_at is not None else time.time(),
            status,
            redelivery,
            installation.get("id") if isinstance(installation, dict) else None,
        )
        self.deliveries.append(delivery)
        return delivery

    def redeliver_later(self, found: HookDelivery) -> None:
        """GitHub accepts a redelivery request and delivers afterwards, with the same GUID
        and body; the log keeps the pending send until it is done."""
        self.redelivery_requests.append(found.delivery_id)
        pending = asyncio.create_task(
            self.send(found.event, found.payload, guid=found.guid, redelivery=True)
        )
        self._pending.add(pending)
        pending.add_done_callback(self._pending.discard)

    def find(self, delivery_id: int) -> HookDelivery | None:
        return next((d for d in self.deliveries if d.delivery_id == delivery_id), None)

    def newest_first(self) -> list[HookDelivery]:
        return sorted(self.deliveries, key=lambda d: (d.delivered_at, d.delivery_id), reverse=True)
