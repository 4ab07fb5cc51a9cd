"""Schema migrations: ``keel db upgrade`` and the automatic upgrade on start.

Alembic (and Mako with it) is imported only when there is something to migrate: ``serve`` and
``worker`` check at start-up, and on a current database that check is one query against the
head read from the revision files, so the processes do not carry Alembic's ~11 MB.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, text
from sqlalchemy.exc import DBAPIError

if TYPE_CHECKING:
    from alembic.config import Config

_SCRIPTS = Path(__file__).with_name("migrations")
_REVISION = re.compile(r"^revision(?:\s*:\s*str)?\s*=\s*['\"]([^'\"]+)['\"]\s*$", re.M)
_DOWN = re.compile(r"^down_revision(?:\s*:[^=]+)?\s*=\s*(?:None|['\"]([^'\"]+)['\"])\s*$", re.M)


def _config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision; a no-op when already there."""
    head = head_from_files()
    if head is not None and current_revision(engine) == head:
        return
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def head_from_files() -> str | None:
    """The one revision no other revision names as its parent, read from the files as text;
    None when a file says more than this reads (a merge, a tuple): then Alembic decides."""
    revisions: set[str] = set()
    parents: set[str] = set()
    for path in (_SCRIPTS / "versions").glob("*.py"):
        source = path.read_text()
        found = _REVISION.findall(source)
        down = _DOWN.search(source)
        if not found and down is None:
            continue  # not a revision (``__init__.py``)
        if len(found) != 1 or down is None:
            return None
        revisions.add(found[0])
        if down.group(1):
            parents.add(down.group(1))
    heads = revisions - parents
    return heads.pop() if len(heads) == 1 else None


def current_revision(engine: Engine) -> str | None:
    """The applied revision, or None (no schema yet, or the table is unreadable)."""
    try:
        with engine.connect() as connection:
            rows = connection.execute(text("SELECT version_num FROM alembic_version")).all()
    except DBAPIError:
        return None
    return str(rows[0][0]) if len(rows) == 1 else None


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(_config()).get_current_head()


def is_current(engine: Engine) -> bool:
    head = head_from_files()
    if head is not None:
        return current_revision(engine) == head
    from alembic.runtime.migration import MigrationContext

    head = head_revision()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current == head


def revision(engine: Engine, message: str) -> None:
    """Developer aid: autogenerate a new revision from the models."""
    from alembic import command

    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.revision(config, message=message, autogenerate=True)
