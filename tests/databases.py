"""PostgreSQL test databases: each test gets a fresh copy of a migrated template."""

from __future__ import annotations

import os
import shutil
import uuid
from pathlib import Path

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


class Databases:
    """Fresh databases of one engine: empty (no schema at all) or migrated to the head."""

    def __init__(self, engine: str, tmp_path: Path, pg_template: str | None, sqlite: Path):
        self.engine, self._tmp = engine, tmp_path
        self._pg_template, self._sqlite = pg_template, sqlite
        self.made: list[str] = []

    def empty(self) -> str:
        return self._make(None)

    def migrated(self) -> str:
        return self._make(self._sqlite if self.engine == "sqlite" else self._pg_template)

    def _make(self, template: Path | str | None) -> str:
        if self.engine == "sqlite":
            path = self._tmp / f"db{len(self.made)}.db"
            self.made.append(str(path))
            if template:
                shutil.copyfile(template, path)
            return f"sqlite:///{path}"
        name, url = fresh_pg(str(template or "template0"))
        self.made.append(name)
        return url
