"""Installations and OAuth states: what a provider's install flow leaves in Keel's database.

An installation is stored sealed (ciphertext the adapter made with its key), one row per
(provider, enterprise, team, kind, user): saving again replaces it, in one transaction.
A state is good once, until it expires: consuming it deletes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, delete, select
from sqlalchemy.orm import Session

from runtime.store.models import InstallationRow, OAuthStateRow


@dataclass(frozen=True, slots=True)
class InstallationKey:
    """Which installation; ``None`` parts are stored as "" so that uniqueness holds."""

    provider: str
    enterprise_id: str | None
    team_id: str | None
    kind: str  # bot | installation
    user_id: str | None = None


@dataclass(frozen=True, slots=True)
class SealedInstallation:
    key: InstallationKey
    sealed: str
    installed_at: datetime


def save(session: Session, key: InstallationKey, sealed: str, installed_at: datetime) -> None:
    session.execute(delete(InstallationRow).where(*_matching(key)))
    session.add(
        InstallationRow(
            provider=key.provider,
            enterprise_id=key.enterprise_id or "",
            team_id=key.team_id or "",
            kind=key.kind,
            user_id=key.user_id or "",
            sealed=sealed,
            installed_at=installed_at,
            created_at=installed_at,
        )
    )


def find(session: Session, key: InstallationKey) -> SealedInstallation | None:
    row = session.scalars(select(InstallationRow).where(*_matching(key))).first()
    if row is None:
        return None
    return SealedInstallation(key, row.sealed, row.installed_at)


def latest(session: Session, key: InstallationKey) -> SealedInstallation | None:
    """The newest installation of the team, whoever installed it (``key.user_id`` ignored)."""
    query = (
        select(InstallationRow)
        .where(*_matching(key, with_user=False))
        .order_by(InstallationRow.installed_at.desc(), InstallationRow.installation_id.desc())
    )
    row = session.scalars(query).first()
    if row is None:
        return None
    return SealedInstallation(key, row.sealed, row.installed_at)


def remove(session: Session, key: InstallationKey, *, any_user: bool = False) -> int:
    """Forget the installation (with ``any_user``, every user's of that team and kind)."""
    result = session.execute(delete(InstallationRow).where(*_matching(key, with_user=not any_user)))
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def remove_team(session: Session, provider: str, enterprise_id: str | None, team_id: str) -> int:
    result = session.execute(
        delete(InstallationRow).where(
            InstallationRow.provider == provider,
            InstallationRow.enterprise_id == (enterprise_id or ""),
            InstallationRow.team_id == team_id,
        )
    )
    return int(result.rowcount or 0)  # type: ignore[attr-defined]


def _matching(key: InstallationKey, *, with_user: bool = True) -> list[ColumnElement[bool]]:
    where = [
        InstallationRow.provider == key.provider,
        InstallationRow.enterprise_id == (key.enterprise_id or ""),
        InstallationRow.team_id == (key.team_id or ""),
        InstallationRow.kind == key.kind,
    ]
    if with_user:
        where.append(InstallationRow.user_id == (key.user_id or ""))
    return where


def issue_state(session: Session, state: str, *, now: datetime, expires_at: datetime) -> None:
    session.add(OAuthStateRow(state=state, expires_at=expires_at, created_at=now))


def consume_state(session: Session, state: str, *, now: datetime) -> bool:
    """True once for a state issued and not expired; it cannot be used again."""
    result = session.execute(
        delete(OAuthStateRow).where(OAuthStateRow.state == state, OAuthStateRow.expires_at > now)
    )
    return bool(result.rowcount)  # type: ignore[attr-defined]
