"""A database at a revision id no file has any more (#41).

``0008_prloop`` (linked pull requests after ``0007_slack``) was renamed ``0009_prloop`` when
``0008_context`` and ``0008_github`` came before it: a database created in between could not
upgrade (a 254-line traceback). It now rejoins the chain; any other unknown id is refused in
one line, with nothing changed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, column, inspect, table, text
from sqlalchemy.orm import Session

from runtime.errors import UnknownSchema
from runtime.store import links, migrate
from runtime.store.engine import make_engine
from runtime.store.models import Base, UtcDateTime
from tests.databases import Databases

SCRIPTS = Path(migrate.__file__).with_name("migrations")
ROOT = Path(__file__).resolve().parents[2]
KEEL = [sys.executable, "-c", "from adapters.cli import main; main()"]
NOW = datetime(2026, 12, 6, 4, 0, tzinfo=UTC)
# What came after 0007_slack on main, where prloop's branch had its 0008_prloop.
AFTER_SLACK = (
    "0008_context.py",
    "0008_github.py",
    "0009_prloop.py",
    "0010_outbox.py",
    "0011_workspace_owners.py",
)


def _prloop_branch_scripts(tmp_path: Path, *, first_form: bool) -> Path:
    """The migrations as prloop's branch had them: 0001 … 0007_slack, then 0008_prloop, whose
    text was 0009_prloop's but for its ids (ceaec48); its first form (1107046) lacked the
    signals index."""
    scripts = tmp_path / "prloop-migrations"
    shutil.copytree(SCRIPTS, scripts, ignore=shutil.ignore_patterns("__pycache__", "*.txt"))
    for name in AFTER_SLACK:
        (scripts / "versions" / name).unlink()
    source = (SCRIPTS / "versions" / "0009_prloop.py").read_text()
    source = source.replace('"0009_prloop"', '"0008_prloop"').replace(
        '"0008_github"', '"0007_slack"'
    )
    if first_form:
        lines = [line for line in source.splitlines() if "ix_signals_objective_kind" not in line]
        source = "\n".join(lines) + "\n"
    (scripts / "versions" / "0008_prloop.py").write_text(source)
    return scripts


def _upgrade_with(engine: Engine, scripts: Path, revision: str) -> None:
    config = Config()
    config.set_main_option("script_location", str(scripts))
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def _put_pull_link(engine: Engine) -> None:
    pull_links = table(
        "pull_links",
        *(column(name) for name in ("repo", "number", "objective_key", "task_id", "head_ref")),
        column("head_sha"),
        column("created_at", UtcDateTime()),
        column("updated_at", UtcDateTime()),
    )
    row = {
        "repo": "acme/shop",
        "number": 7,
        "objective_key": "github:acme/shop#7",
        "task_id": "t1",
        "head_ref": "keel/fix",
        "head_sha": "a" * 40,
        "created_at": NOW,
        "updated_at": NOW,
    }
    with engine.begin() as connection:
        connection.execute(pull_links.insert(), [row])


def _schema_differences(engine: Engine) -> list[object]:
    with engine.connect() as connection:
        return list(compare_metadata(MigrationContext.configure(connection), Base.metadata))


def test_a_released_id_over_a_schema_missing_its_tables_is_refused(databases: Databases) -> None:
    """The github branch stamped 0008_github before 0008_context came ahead of it: such a
    database lacks model_calls, and the upgrade says so instead of going on without it."""
    engine = make_engine(databases.empty())
    _upgrade_with(engine, SCRIPTS, "0008_github")
    with engine.begin() as connection:
        connection.execute(text("DROP TABLE model_calls"))

    with pytest.raises(UnknownSchema, match=r"'0008_github' but lacks the tables model_calls"):
        migrate.upgrade(engine)
    engine.dispose()


@pytest.mark.parametrize("first_form", [False, True], ids=["ceaec48", "1107046"])
def test_a_database_at_retired_0008_prloop_upgrades_to_head_with_its_links(
    databases: Databases, tmp_path: Path, first_form: bool
) -> None:
    engine = make_engine(databases.empty())
    _upgrade_with(engine, _prloop_branch_scripts(tmp_path, first_form=first_form), "head")
    assert migrate.current_revision(engine) == "0008_prloop"
    _put_pull_link(engine)

    migrate.upgrade(engine)

    assert migrate.current_revision(engine) == migrate.head_from_files()
    # 0008_context's and 0008_github's tables were made; 0009_prloop's were kept, not remade.
    assert _schema_differences(engine) == []
    with Session(engine) as session:
        link = links.pull_link(session, "acme/shop", 7)
    engine.dispose()
    assert link is not None and link.objective_key == "github:acme/shop#7"
    assert link.head_sha == "a" * 40


def test_every_retired_revision_rejoins_a_released_one() -> None:
    from alembic.script import ScriptDirectory

    known = {s.revision for s in ScriptDirectory(str(SCRIPTS)).walk_revisions()}
    for retired in migrate.RETIRED.values():
        assert retired.revision not in known, f"{retired.revision} is a revision again"
        assert {retired.rejoin, retired.became} <= known


def _keel(*args: str, url: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "KEEL_DATABASE_URL": url, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [*KEEL, *args], env=env, cwd=cwd, capture_output=True, text=True, timeout=120
    )


def _stamp(url: str, revision: str) -> None:
    engine = make_engine(url)
    with engine.begin() as connection:
        connection.execute(text("UPDATE alembic_version SET version_num = :r"), {"r": revision})
    engine.dispose()


@pytest.mark.parametrize("verb", [("db", "upgrade"), ("serve",), ("worker",)], ids=" ".join)
def test_an_unknown_revision_is_one_line_naming_it_and_changes_nothing(
    db_url: str, tmp_path: Path, verb: tuple[str, ...]
) -> None:
    _stamp(db_url, "0042_from_the_future")
    engine = make_engine(db_url)
    tables = set(inspect(engine).get_table_names())

    result = _keel(*verb, url=db_url, cwd=tmp_path)

    assert result.returncode == 2
    # serve and worker log as JSON lines (Alembic's own among them), and serve warns that no
    # surface is enabled; the error is one line, with no traceback.
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if line.startswith("error")]
    assert line.startswith("error: the database is at schema revision '0042_from_the_future'")
    assert f"its revisions run 0001 to {migrate.head_from_files()}, the head" in line
    assert "Run that Keel, or restore a backup" in line
    assert migrate.current_revision(engine) == "0042_from_the_future"
    assert set(inspect(engine).get_table_names()) == tables
    engine.dispose()
