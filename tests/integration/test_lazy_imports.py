"""What a process imports: ``keel tasks ls`` and a worker's composition root stay small.

Each check runs in a fresh interpreter (a subprocess), since this test process has imported
everything already, and lists which heavy modules were loaded when it exits.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from runtime.store.engine import make_engine
from runtime.store.migrate import head_from_files, head_revision, upgrade

ROOT = Path(__file__).resolve().parents[2]
HEAVY = (
    "slack_bolt", "github", "uvicorn", "fastapi", "starlette", "alembic", "psycopg",
    # PyGithub's own imports, httpx and cryptography: loaded by the first call that needs them
    "requests", "urllib3", "jwt", "nacl", "httpx", "cryptography",
)
REPORT = (
    "import atexit, sys\n"
    f"atexit.register(lambda: print('LOADED', ','.join(m for m in {HEAVY!r} "
    "if m in sys.modules), file=sys.stderr))\n"
)


def _loaded(code: str, tmp_path: Path, db_url: str) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "KEEL_DATABASE_URL": db_url}
    done = subprocess.run(
        [sys.executable, "-c", REPORT + code], env=env, cwd=tmp_path, capture_output=True,
        text=True, timeout=60,
    )
    line = next(x for x in done.stderr.splitlines() if x.startswith("LOADED"))
    return set(filter(None, line.removeprefix("LOADED ").split(",")))


def _current_sqlite(tmp_path: Path) -> str:
    url = f"sqlite:///{tmp_path / 'keel.db'}"
    engine = make_engine(url)
    upgrade(engine)
    engine.dispose()
    return url


def test_tasks_ls_imports_no_surface_library_no_server_and_no_alembic(tmp_path: Path) -> None:
    url = _current_sqlite(tmp_path)
    code = "from adapters.cli import main\nsys.argv = ['keel', 'tasks', 'ls']\nmain()\n"
    assert _loaded(code, tmp_path, url) == set()


def test_a_workers_keel_imports_no_web_framework_bolt_github_alembic_or_psycopg_on_sqlite(
    tmp_path: Path,
) -> None:
    url = _current_sqlite(tmp_path)
    code = (
        "from adapters.assembly import Keel\n"
        "from adapters.config import AppConfig\n"
        "keel = Keel(AppConfig())\n"
        "keel.migrate()\n"
        "keel.db.close()\n"
    )
    assert _loaded(code, tmp_path, url) == set()


def test_a_servers_app_loads_its_web_framework_but_no_alembic_github_or_psycopg_on_sqlite(
    tmp_path: Path,
) -> None:
    url = _current_sqlite(tmp_path)
    code = (
        "from adapters.config import AppConfig\n"
        "from adapters.web.app import create_app\n"
        "create_app(AppConfig())\n"
    )
    assert _loaded(code, tmp_path, url) == {"slack_bolt", "fastapi", "starlette"}


def test_a_database_that_is_behind_is_still_upgraded_by_alembic(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'new.db'}"
    code = (
        "from runtime.store.engine import make_engine\n"
        "from runtime.store.migrate import current_revision, head_from_files, upgrade\n"
        "import os\n"
        "engine = make_engine(os.environ['KEEL_DATABASE_URL'])\n"
        "upgrade(engine)\n"
        "assert current_revision(engine) == head_from_files()\n"
    )
    assert "alembic" in _loaded(code, tmp_path, url)


def test_the_head_read_from_the_revision_files_is_alembics() -> None:
    assert head_from_files() is not None
    assert head_from_files() == head_revision()
