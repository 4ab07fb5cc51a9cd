"""The application's lifecycle: readiness, and SIGTERM during a tool wait losing nothing."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
import pytest
import yaml
from sqlalchemy import text
from sqlalchemy.pool import QueuePool

from adapters.config import build_config
from adapters.demo.repo import create_sample_repo
from adapters.emulators.server import serve
from adapters.web.app import create_app
from runtime.scheduler import Scheduler
from runtime.store import executions, tool_calls
from runtime.store.engine import Database, make_engine
from runtime.store.migrate import head_from_files
from tests.databases import admin_url
from tests.harness import schedule_task

ROOT = Path(__file__).resolve().parents[2]
HEAD = head_from_files()
CURRENT = {"database": HEAD, "code": HEAD}


def test_readyz_fails_when_database_becomes_unreachable(db_url: str, tmp_path: Path) -> None:
    config = build_config({"database": {"url": db_url}}, env={})
    with serve(create_app(config, workers=False), lifespan="on") as server:
        assert httpx.get(server.url + "/readyz").status_code == 200
        assert httpx.get(server.url + "/healthz").json() == {"ok": True}
        _make_unreachable(db_url)
        response = httpx.get(server.url + "/readyz")
        assert response.status_code == 503
        assert response.json()["ready"] is False
        assert httpx.get(server.url + "/healthz").status_code == 200  # the process is still up


def test_the_servers_address_leads_to_the_task_list(db_url: str) -> None:
    config = build_config({"database": {"url": db_url}}, env={})
    with serve(create_app(config, workers=False), lifespan="on") as server:
        bare = httpx.get(server.url + "/")
        carried = httpx.get(server.url + "/?token=abc")
        page = httpx.get(server.url + "/", follow_redirects=True)
    assert (bare.status_code, bare.headers["location"]) == (307, "/ui/tasks")
    assert carried.headers["location"] == "/ui/tasks?token=abc"
    assert page.status_code == 200 and "text/html" in page.headers["content-type"]


def test_building_keel_leaves_the_schema_alone_and_serve_start_up_migrates(
    tmp_path: Path,
) -> None:
    from adapters.assembly import Keel

    url = f"sqlite:///{tmp_path / 'fresh.db'}"
    config = build_config({"database": {"url": url}, "workspace": {"root": str(tmp_path)}}, env={})
    Keel(config).db.close()
    tables = sqlite3.connect(tmp_path / "fresh.db").execute("SELECT name FROM sqlite_master")
    assert tables.fetchall() == []
    with serve(create_app(config, workers=False), lifespan="on") as server:
        assert httpx.get(server.url + "/readyz").json() == {"ready": True, "schema": CURRENT}


def test_readyz_names_both_revisions_and_is_not_ready_when_the_schema_is_behind(
    db_url: str,
) -> None:
    config = build_config({"database": {"url": db_url}}, env={})
    with serve(create_app(config, workers=False), lifespan="on") as server:
        assert httpx.get(server.url + "/readyz").json() == {"ready": True, "schema": CURRENT}
        engine = make_engine(db_url)
        with engine.begin() as connection:  # as a database restored from an older backup
            connection.execute(text("UPDATE alembic_version SET version_num = '0009_prloop'"))
        engine.dispose()
        response = httpx.get(server.url + "/readyz")
    assert response.status_code == 503
    assert response.json() == {
        "ready": False,
        "error": "migrations pending",
        "schema": {"database": "0009_prloop", "code": HEAD},
    }


def test_database_pool_size_and_echo_reach_the_engine_when_configured(
    db_url: str, tmp_path: Path
) -> None:
    from adapters.assembly import Keel

    tree = {
        "database": {"url": db_url, "pool_size": 3, "echo": True},
        "workspace": {"root": str(tmp_path / "ws")},
    }
    keel = Keel(build_config(tree, env={}))
    try:
        assert keel.db.engine.echo is True
        if keel.db.is_postgres:
            pool = keel.db.engine.pool
            assert isinstance(pool, QueuePool) and pool.size() == 3
    finally:
        keel.db.close()


async def test_outage_give_up_reaches_the_executor_when_configured(tmp_path: Path) -> None:
    from adapters.assembly import Keel
    from runtime.executor.runner import Runner

    tree = {
        "database": {"url": f"sqlite:///{tmp_path / 'keel.db'}"},
        "workspace": {"root": str(tmp_path / "ws")},
        "model": {"outage_give_up_s": 120},
    }
    keel = Keel(build_config(tree, env={}))
    try:
        await keel.connect()
        runner = keel.worker.runner
        assert isinstance(runner, Runner) and runner.ctx.outage_give_up_s == 120
    finally:
        keel.db.close()


def _make_unreachable(db_url: str) -> None:
    if db_url.startswith("sqlite"):
        # Overwrite the file in place: open connections now read something that is not a
        # database, as after a disk fault.
        path = Path(db_url.removeprefix("sqlite:///"))
        size = path.stat().st_size
        with path.open("r+b") as f:
            f.write(b"\x00not a database" * (size // 16 + 1))
        return
    from sqlalchemy import create_engine
    from sqlalchemy.engine import make_url

    name = make_url(db_url).database
    admin = admin_url()
    assert admin is not None
    engine = create_engine(admin, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE "{name}" WITH (FORCE)'))
    engine.dispose()


SCRIPT = {
    "scripts": [
        {
            "turns": [
                {
                    "tool_calls": [
                        {
                            "name": "run_command",
                            "args": {
                                "command": "sleep 3; echo ran >> ../ran.log; echo finished",
                                "timeout_s": 60,
                            },
                        }
                    ]
                },
                {"expect_seen": ["finished"], "say": "the command finished"},
            ]
        }
    ]
}


def _worker(config_path: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-c",
            "from adapters.cli import main; main()",
            "worker",
            "--config",
            str(config_path),
        ],
        cwd=ROOT,
        env={**os.environ, "KEEL_DATABASE_URL": ""},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )


@pytest.mark.parametrize(
    "stop_signal", [signal.SIGTERM, signal.SIGKILL], ids=["sigterm", "sigkill"]
)
async def test_tool_wait_loses_nothing_when_worker_is_stopped_and_restarted(
    db_url: str, tmp_path: Path, stop_signal: signal.Signals
) -> None:
    bare = create_sample_repo(tmp_path / "origin")
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(SCRIPT))
    config = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {
            "root": str(tmp_path / "ws"),
            "sandbox": "none",
            "repositories": {"shop": {"url": bare.as_uri()}},
        },
        "worker": {"concurrency": 1, "poll_interval_s": 0.1, "lease_seconds": 3},
    }
    config_path = tmp_path / "app.yaml"
    config_path.write_text(yaml.safe_dump(config))
    db = Database.from_url(db_url)
    task = await schedule_task(db, repo="shop", message="run it")
    worker = _worker(config_path)
    try:
        await _until(lambda: _call_state(db, task.task_id), "started")
        worker.send_signal(stop_signal)
        code = worker.wait(timeout=20)
        run = await db.read(lambda s: executions.load_run(s, task.task_id))
        assert run is not None
        if stop_signal is signal.SIGTERM:
            assert code == 0, worker.stderr.read() if worker.stderr else ""
            assert run.lease_id is None  # handed back: the next worker need not wait for expiry
        worker = _worker(config_path)
        await _until(lambda: _status(db, task.task_id), "succeeded", timeout=40)
    finally:
        worker.send_signal(signal.SIGTERM)
        worker.wait(timeout=20)
    [call] = await db.read(lambda s: tool_calls.all_calls(s, task.task_id))
    assert call.outcome == "ok" and "finished" in (call.result or {}).get("output", "")
    ran = next((tmp_path / "ws").glob("*/ran.log"), None) or next(
        (tmp_path / "ws").rglob("ran.log")
    )
    assert ran.read_text().splitlines() == ["ran"]  # the command ran once, not again
    db.close()


async def _call_state(db: Database, task_id: str) -> str | None:
    calls = await db.read(lambda s: tool_calls.all_calls(s, task_id))
    return calls[0].dispatch_state if calls else None


async def _status(db: Database, task_id: str) -> str | None:
    task = await Scheduler(db).get(task_id)
    return task.status.value if task else None


async def _until(
    read: Callable[[], Awaitable[str | None]], value: str, timeout: float = 30
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if await read() == value:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"never reached {value!r} (last {await read()!r})")
