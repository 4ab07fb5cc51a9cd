"""A released migration is never edited, renamed or deleted (#41).

Databases already ran the text a released migration had: an edit never reaches them, and a
rename strands them (a database stamped with ``0008_prloop`` could not upgrade once it became
``0009_prloop``). ``runtime/store/migrations/released.txt`` records each released revision
with its file's sha256; these tests compare the files with it.
"""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

from alembic.script import ScriptDirectory

from runtime.store import migrate

SCRIPTS = Path(migrate.__file__).with_name("migrations")
RECORD = "released.txt"


def _recorded(scripts: Path) -> dict[str, tuple[str, str]]:
    """revision → (file name, sha256), as released.txt lists them."""
    entries: dict[str, tuple[str, str]] = {}
    for line in (scripts / RECORD).read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            revision, name, digest = line.split()
            entries[revision] = (name, digest)
    return entries


def _present(scripts: Path) -> dict[str, tuple[str, str]]:
    """revision → (file name, sha256) of the migration files as they are now."""
    return {
        s.revision: (Path(s.path).name, hashlib.sha256(Path(s.path).read_bytes()).hexdigest())
        for s in ScriptDirectory(str(scripts)).walk_revisions()
    }


def problems(scripts: Path) -> list[str]:
    """What differs between the migration files and the record, each said with what to do."""
    present, recorded = _present(scripts), _recorded(scripts)
    files = {name: revision for revision, (name, _) in present.items()}
    found: list[str] = []
    for revision, (name, digest) in recorded.items():
        if present.get(revision, ("", ""))[0] != name:
            now = f": {name} now says revision {files[name]}" if name in files else ""
            found.append(
                f"released migration {revision} ({name}) is gone{now}. A database stamped "
                f"{revision} could not upgrade: restore the file as released, and change the "
                "schema with a new migration"
            )
        elif present[revision][1] != digest:
            found.append(
                f"released migration {revision} ({name}) was edited: databases already ran the "
                f"released text, so the edit would never reach them. Restore it (git checkout "
                f"main -- runtime/store/migrations/versions/{name}) and add a new migration "
                "after the head instead"
            )
    found += [
        f"migration {revision} ({name}) is not in {RECORD}; once it is on main, add the line: "
        f"{revision} {name} {digest}"
        for revision, (name, digest) in present.items()
        if revision not in recorded
    ]
    return found


def test_the_migrations_are_the_released_ones() -> None:
    assert problems(SCRIPTS) == []


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "migrations"
    shutil.copytree(SCRIPTS, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


def test_an_edited_migration_is_refused_with_what_to_do(tmp_path: Path) -> None:
    scripts = _copy(tmp_path)
    path = scripts / "versions" / "0007_slack.py"
    path.write_text(path.read_text().replace("nullable=False", "nullable=True", 1))
    [problem] = problems(scripts)
    assert problem.startswith("released migration 0007_slack (0007_slack.py) was edited")
    assert "add a new migration after the head" in problem


# The newest migration: renaming it leaves the chain whole, so only the record objects.
HEAD = ScriptDirectory(str(SCRIPTS)).get_current_head() or ""


def test_a_renamed_revision_is_refused(tmp_path: Path) -> None:
    scripts = _copy(tmp_path)
    versions = scripts / "versions"
    old = (versions / f"{HEAD}.py").read_text()
    (versions / f"{HEAD}.py").write_text(old.replace(f'"{HEAD}"', '"9999_renamed"'))
    [gone, new] = problems(scripts)
    assert gone.startswith(f"released migration {HEAD} ({HEAD}.py) is gone")
    assert "now says revision 9999_renamed" in gone
    assert new.startswith(f"migration 9999_renamed ({HEAD}.py) is not in released.txt")


def test_a_new_migration_asks_to_be_recorded(tmp_path: Path) -> None:
    scripts = _copy(tmp_path)
    new = f'revision = "9999_next"\ndown_revision = "{HEAD}"\n\n\ndef upgrade() -> None:\n'
    (scripts / "versions" / "9999_next.py").write_text(new + "    pass\n")
    digest = hashlib.sha256((scripts / "versions" / "9999_next.py").read_bytes()).hexdigest()
    assert problems(scripts) == [
        f"migration 9999_next (9999_next.py) is not in released.txt; once it is on main, add "
        f"the line: 9999_next 9999_next.py {digest}"
    ]
