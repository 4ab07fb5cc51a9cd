"""Shared test fixtures. A guard fails any test that tries to reach a non-loopback address."""

from __future__ import annotations

import ipaddress
import os
import shutil
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

from runtime.store.engine import Database, make_engine
from runtime.store.migrate import upgrade
from tests.databases import PG_ENV, Databases, admin_url, drop_pg, fresh_pg

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


def _guarded_connect(self: socket.SocketType, address: Any) -> None:
    _check_address(address)
    _real_connect(self, address)


def _guarded_connect_ex(self: socket.SocketType, address: Any) -> int:
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


@pytest.fixture(scope="session")
def _pg_template() -> Iterator[str | None]:
    admin = admin_url()
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


@pytest.fixture(scope="session")
def _sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One migrated SQLite file per test process (xdist worker): a copy costs far less than
    running every migration again for each of the suite's databases."""
    path = tmp_path_factory.mktemp("sqlite-template") / "keel.db"
    engine = make_engine(f"sqlite:///{path}")
    upgrade(engine)
    engine.dispose()
    # Closing the last connection checkpoints the WAL into the file; a companion left over
    # would hold part of the schema that a copy of the file alone would miss.
    assert not path.with_name("keel.db-wal").exists(), "template WAL not checkpointed"
    return path


def _sqlite_copy(template: Path, path: Path) -> str:
    shutil.copyfile(template, path)
    return f"sqlite:///{path}"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    _pg_template: str | None,
    _sqlite_template: Path,
) -> Iterator[str]:
    """A migrated, empty database URL of each engine."""
    if request.param == "sqlite":
        yield _sqlite_copy(_sqlite_template, tmp_path / "keel.db")
        return
    if _pg_template is None:
        if os.environ.get("KEEL_REQUIRE_POSTGRES"):
            pytest.fail(f"{PG_ENV} is required here but not set")
        pytest.skip(f"PostgreSQL not configured ({PG_ENV} unset)")
    name, url = fresh_pg(_pg_template)
    yield url
    drop_pg(name)


@pytest.fixture(params=["sqlite", "postgresql"])
def databases(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    _pg_template: str | None,
    _sqlite_template: Path,
) -> Iterator[Databases]:
    """Fresh databases of each engine, empty or migrated (for migration tests)."""
    if request.param == "postgresql" and _pg_template is None:
        if os.environ.get("KEEL_REQUIRE_POSTGRES"):
            pytest.fail(f"{PG_ENV} is required here but not set")
        pytest.skip(f"PostgreSQL not configured ({PG_ENV} unset)")
    made = Databases(request.param, tmp_path, _pg_template, _sqlite_template)
    yield made
    if request.param == "postgresql":
        for name in made.made:
            drop_pg(name)


@pytest.fixture
def database(db_url: str) -> Iterator[Database]:
    db = Database.from_url(db_url)
    yield db
    db.close()


@pytest.fixture
def db_factory(databases: Databases) -> Callable[[], str]:
    """Makes as many fresh, migrated databases of one engine as a test needs."""
    return databases.migrated
