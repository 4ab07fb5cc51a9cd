"""Shared test fixtures. A guard fails any test that tries to reach a non-loopback address."""

from __future__ import annotations

import ipaddress
import os
import socket
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runtime.store.engine import Database, make_engine
from runtime.store.migrate import upgrade

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex


def _check_address(address: Any) -> None:
    if not isinstance(address, tuple) or not address:
        return  # unix sockets
    host = str(address[0])
    if host in ("localhost", ""):
        return
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        raise RuntimeError(f"test tried to reach non-loopback host {host!r}") from None
    if not ip.is_loopback:
        raise RuntimeError(f"test tried to reach non-loopback address {host}")


def _guarded_connect(self: socket.socket, address: Any) -> None:
    _check_address(address)
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.socket, address: Any) -> int:
    _check_address(address)
    return _real_connect_ex(self, address)


@pytest.fixture(autouse=True)
def _loopback_only() -> Iterator[None]:
    socket.socket.connect = _guarded_connect  # type: ignore[method-assign]
    socket.socket.connect_ex = _guarded_connect_ex  # type: ignore[method-assign]
    try:
        yield
    finally:
        socket.socket.connect = _real_connect  # type: ignore[method-assign]
        socket.socket.connect_ex = _real_connect_ex  # type: ignore[method-assign]


# -- databases: every storage test runs on SQLite and on PostgreSQL --------------------------


PG_ENV = "KEEL_TEST_DATABASE_URL"


def _admin_url() -> str | None:
    url = os.environ.get(PG_ENV)
    return str(make_url(url).set(drivername="postgresql+psycopg")) if url else None


@pytest.fixture(scope="session")
def _pg_template() -> Iterator[str | None]:
    admin = _admin_url()
    if admin is None:
        yield None
        return
    name = f"keel_tmpl_{os.getpid()}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    migrated = make_engine(str(make_url(admin).set(database=name)))
    upgrade(migrated)
    migrated.dispose()
    yield name
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


def _fresh_pg(template: str) -> tuple[str, str]:
    admin = _admin_url()
    assert admin is not None
    name = f"keel_t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    engine.dispose()
    return name, str(make_url(admin).set(database=name))


def _drop_pg(name: str) -> None:
    admin = _admin_url()
    assert admin is not None
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(
    request: pytest.FixtureRequest, tmp_path: Path, _pg_template: str | None
) -> Iterator[str]:
    """A migrated, empty database URL of each engine."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'keel.db'}"
        engine = make_engine(url)
        upgrade(engine)
        engine.dispose()
        yield url
        return
    if _pg_template is None:
        if os.environ.get("KEEL_REQUIRE_POSTGRES"):
            pytest.fail(f"{PG_ENV} is required here but not set")
        pytest.skip(f"PostgreSQL not configured ({PG_ENV} unset)")
    name, url = _fresh_pg(_pg_template)
    yield url
    _drop_pg(name)


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database.from_url(db_url)
    yield db
    db.close()
