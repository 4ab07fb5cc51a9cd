"""PostgreSQL test databases: each test gets a fresh copy of a migrated template."""

from __future__ import annotations

import os
import uuid

from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url

PG_ENV = "KEEL_TEST_DATABASE_URL"


def admin_url() -> str | None:
    url = os.environ.get(PG_ENV)
    return str(make_url(url).set(drivername="postgresql+psycopg")) if url else None


def fresh_pg(template: str) -> tuple[str, str]:
    admin = admin_url()
    assert admin is not None
    name = f"keel_t_{uuid.uuid4().hex[:12]}"
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}" TEMPLATE "{template}"'))
    engine.dispose()
    return name, str(make_url(admin).set(database=name))


def drop_pg(name: str) -> None:
    admin = admin_url()
    assert admin is not None
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()
