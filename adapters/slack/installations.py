"""Where bolt's OAuth flow keeps workspace installations and OAuth states: Keel's database.

``SealedInstallationStore`` follows slack_sdk's SQLAlchemy installation store (save,
find_bot, find_installation, delete_*) with two differences: each installation is one JSON
document sealed with Fernet (AES-128-CBC + HMAC-SHA256, from ``cryptography``) under a key
from the environment, so no token is ever in the clear at rest; and saving replaces the
previous document of the same team and user instead of keeping history (old tokens are
dead weight). ``DatabaseStateStore`` issues and consumes the OAuth ``state`` parameter.
"""

from __future__ import annotations

import json
import logging
import secrets
from datetime import UTC, datetime, timedelta
from typing import Any

from cryptography.fernet import Fernet, InvalidToken
from slack_sdk.oauth.installation_store.async_installation_store import AsyncInstallationStore
from slack_sdk.oauth.installation_store.models.bot import Bot
from slack_sdk.oauth.installation_store.models.installation import Installation
from slack_sdk.oauth.state_store.async_state_store import AsyncOAuthStateStore

from runtime.clock import Clock
from runtime.errors import Permanent
from runtime.store import installations as store
from runtime.store.engine import Database
from runtime.store.installations import InstallationKey

log = logging.getLogger(__name__)
_PROVIDER = "slack"


class Sealer:
    """Seals and opens installation documents with one Fernet key."""

    def __init__(self, key: str) -> None:
        self._fernet = Fernet(key.encode())

    def seal(self, document: dict[str, Any]) -> str:
        return self._fernet.encrypt(json.dumps(document, default=_iso).encode()).decode()

    def open(self, sealed: str) -> dict[str, Any]:
        try:
            document: dict[str, Any] = json.loads(self._fernet.decrypt(sealed.encode()))
        except InvalidToken as e:
            raise Permanent(
                "a stored Slack installation cannot be opened with slack.oauth.encryption_key "
                "(was the key changed?): reinstall the app in that workspace"
            ) from e
        return document


def _iso(value: object) -> str:
    # slack_sdk's models read their timestamps back from ISO text (or from datetimes).
    if isinstance(value, datetime):
        return value.isoformat()
    raise TypeError(f"cannot store {type(value).__name__}")


class SealedInstallationStore(AsyncInstallationStore):
    def __init__(self, db: Database, sealer: Sealer, clock: Clock) -> None:
        self.db = db
        self.sealer = sealer
        self.clock = clock

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_save(self, installation: Installation) -> None:
        document = installation.to_dict()
        key = _key(installation.enterprise_id, installation.team_id, "installation",
                   installation.user_id)
        await self._save(key, document)
        await self.async_save_bot(installation.to_bot())

    async def async_save_bot(self, bot: Bot) -> None:
        await self._save(_key(bot.enterprise_id, bot.team_id, "bot"), bot.to_dict())

    async def _save(self, key: InstallationKey, document: dict[str, Any]) -> None:
        sealed = self.sealer.seal(document)
        now = self.clock.now()
        await self.db.run(lambda s: store.save(s, key, sealed, now))

    async def async_find_bot(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        is_enterprise_install: bool | None = False,
    ) -> Bot | None:
        key = _key(enterprise_id, team_id, "bot")
        found = await self.db.read(lambda s: store.find(s, key))
        if found is None and enterprise_id is not None:
            # An event names its enterprise; a workspace installed outside one does not.
            found = await self.db.read(lambda s: store.find(s, _key(None, team_id, "bot")))
        return Bot(**self.sealer.open(found.sealed)) if found else None

    async def async_find_installation(
        self,
        *,
        enterprise_id: str | None,
        team_id: str | None,
        user_id: str | None = None,
        is_enterprise_install: bool | None = False,
    ) -> Installation | None:
        key = _key(enterprise_id, team_id, "installation", user_id)
        if user_id is None:
            found = await self.db.read(lambda s: store.latest(s, key))
        else:
            found = await self.db.read(lambda s: store.find(s, key))
        return Installation(**self.sealer.open(found.sealed)) if found else None

    async def async_delete_bot(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        key = _key(enterprise_id, team_id, "bot")
        await self.db.run(lambda s: store.remove(s, key))

    async def async_delete_installation(
        self, *, enterprise_id: str | None, team_id: str | None, user_id: str | None = None
    ) -> None:
        key = _key(enterprise_id, team_id, "installation", user_id)
        await self.db.run(lambda s: store.remove(s, key, any_user=user_id is None))

    async def async_delete_all(self, *, enterprise_id: str | None, team_id: str | None) -> None:
        if team_id is None:
            return
        await self.db.run(lambda s: store.remove_team(s, _PROVIDER, enterprise_id, team_id))


def _key(
    enterprise_id: str | None, team_id: str | None, kind: str, user_id: str | None = None
) -> InstallationKey:
    return InstallationKey(_PROVIDER, enterprise_id, team_id, kind, user_id)


class DatabaseStateStore(AsyncOAuthStateStore):
    """The OAuth ``state``: random, stored until used once or ``expiration_seconds`` pass."""

    def __init__(self, db: Database, clock: Clock, expiration_seconds: int = 600) -> None:
        self.db = db
        self.clock = clock
        self.expiration_seconds = expiration_seconds

    @property
    def logger(self) -> logging.Logger:
        return log

    async def async_issue(self, *args: Any, **kwargs: Any) -> str:
        state = secrets.token_urlsafe(24)
        now = self.clock.now()
        expires = now + timedelta(seconds=self.expiration_seconds)
        await self.db.run(lambda s: store.issue_state(s, state, now=now, expires_at=expires))
        return state

    async def async_consume(self, state: str) -> bool:
        now = self.clock.now().astimezone(UTC)
        return await self.db.run(lambda s: store.consume_state(s, state, now=now))
