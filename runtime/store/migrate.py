"""Schema migrations: ``keel db upgrade`` and the automatic upgrade on start."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy import Engine

_SCRIPTS = Path(__file__).with_name("migrations")


def _config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(_SCRIPTS))
    return config


def upgrade(engine: Engine) -> None:
    """Bring the schema to the newest revision; a no-op when already there."""
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")


def head_revision() -> str | None:
    return ScriptDirectory.from_config(_config()).get_current_head()


def is_current(engine: Engine) -> bool:
    head = head_revision()
    with engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current == head


def revision(engine: Engine, message: str) -> None:
    """Developer aid: autogenerate a new revision from the models."""
    config = _config()
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.revision(config, message=message, autogenerate=True)
