"""Fakes at Keel's own ports that tests in several folders use: git credentials, and a model
provider that keeps what it was asked."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from runtime.models.base import ModelRequest, ModelResponse
from runtime.models.scripted import ScriptedProvider


@dataclass
class Credentials:
    """The GitCredentials port: one token for every push, and who asked for it."""

    token: str | None
    asked: list[tuple[str, str]] = field(default_factory=list)

    async def git_token(self, task_id: str, remote_url: str) -> str | None:
        self.asked.append((task_id, remote_url))
        return self.token


class RecordingModel:
    """The scripted model, keeping each request it was sent."""

    def __init__(self, script: Mapping[str, Any]) -> None:
        self.inner = ScriptedProvider.from_dict(script)
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResponse:
        self.requests.append(request)
        return await self.inner.complete(request)
