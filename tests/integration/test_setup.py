"""A repository's setup step as an operator configures it, on both databases, under the real
sandbox: it installs what the tests need from a registry stand-in on loopback (through
Keel's egress proxy: the only way out of the sandbox), the agent's tests then pass with no
network, the next task restores the cached environment instead of running setup, and a
changed lockfile runs it again. Secrets reach setup, and only the ones marked ``agent`` reach
the agent's commands; none is stored anywhere.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI

from adapters.assembly import Keel
from adapters.config import ServerConfig, build_config
from adapters.web.auth import AdminAuth
from adapters.web.ui import build_ui
from runtime.store import ledger, outbox, tool_calls
from runtime.store.records import Task, TaskSpec, TaskStatus
from runtime.store.tool_calls import ToolCallRecord
from runtime.workspace.envcache import EnvCache
from tests.factories import THREAD
from tests.host import require_bwrap
from tests.integration.scripted_keel import rows_containing
from tests.integration.test_devbox_tools import make_bare_repo, sh
from tests.registries import Registry, npm_lockfile, npm_manifest

pytestmark = pytest.mark.usefixtures("bwrap")

PY = sys.executable
PROBE = "VALUE = 42\n"
CONFTEST = (
    "import glob, sys\n"
    "sys.path[:0] = glob.glob('.venv/site')  # what setup installed\n"
)
TEST = "import keelprobe\n\n\ndef test_probe():\n    assert keelprobe.VALUE == 42\n"
PYTEST = f"{PY} -m pytest -q -p no:cacheprovider"
SHOWN = "python -m pytest -q -p no:cacheprovider"  # as evidence names it: no host path
SETUP_SECRET = "setup-only-s3cr3t-value"
AGENT_SECRET = "agent-visible-t0ken-value"


@pytest.fixture
def bwrap() -> None:
    require_bwrap()


@asynccontextmanager
async def running(
    folder: Path,
    db_url: str,
    turns: Sequence[object],
    repositories: dict[str, Any],
    agents: dict[str, Any] | None = None,
) -> AsyncIterator[Keel]:
    """Keel from a config tree (bubblewrap, the scripted model playing ``turns``), running."""
    (folder / "script.yaml").write_text(yaml.safe_dump({"scripts": [{"turns": list(turns)}]}))
    tree = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(folder / "script.yaml")},
        "workspace": {"root": str(folder / "ws"), "sandbox": "bwrap", "repositories": repositories},
        "worker": {"concurrency": 1, "poll_interval_s": 0.05},
        "agents": agents or {"default": {}},
    }
    keel = Keel(build_config(tree, env={}))
    await keel.connect()
    await keel.start()
    try:
        yield keel
    finally:
        await keel.stop()


async def run_task(keel: Keel, repo: str, timeout_s: float = 120) -> Task:
    spec = TaskSpec(
        agent="default", message="run the tests", repo=repo, origin_thread_ref=THREAD,
        objective_key=f"{THREAD}/{time.monotonic_ns()}",
    )
    task = (await keel.scheduler.transact(keel.scheduler.schedule, spec)).task
    for _ in range(round(timeout_s / 0.05)):
        current = await keel.scheduler.get(task.task_id)
        if current is not None and current.status.is_terminal:
            return current
        await asyncio.sleep(0.05)
    raise AssertionError(f"task {task.task_id} did not finish in {timeout_s}s")


async def evidence(keel: Keel, task: Task, kind: str) -> list[dict[str, Any]]:
    rows = await keel.db.read(lambda s: ledger.evidence_of_tree(s, task.root_id))
    return [dict(r.item.detail) for r in rows if r.item.kind == kind]


async def calls(keel: Keel, task: Task) -> list[ToolCallRecord]:
    return await keel.db.read(lambda s: tool_calls.all_calls(s, task.task_id))


async def task_page(keel: Keel, task: Task) -> str:
    """The task's page in Keel's UI, as an operator opens it."""
    app = FastAPI()
    app.include_router(build_ui(keel.db, auth=AdminAuth(ServerConfig()).ui))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1") as http:
        page = await http.get(f"/ui/tasks/{task.task_id}")
    assert page.status_code == 200
    return page.text


async def reply(keel: Keel, task: Task) -> str:
    posts = await keel.db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    return "\n".join(p.body for p in posts if p.purpose == "completion")


def commit(bare: Path, work: Path, files: dict[str, str]) -> None:
    if not work.exists():
        sh("git", "clone", "-q", str(bare), str(work))
    sh("git", "pull", "-q", cwd=work)
    for name, content in files.items():
        (work / name).parent.mkdir(parents=True, exist_ok=True)
        (work / name).write_text(content)
    sh("git", "add", ".", cwd=work)
    sh("git", "-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "change",
       cwd=work)
    sh("git", "push", "-q", "origin", "HEAD:main", cwd=work)


def pip_setup(registry: Registry, extra: str = "") -> str:
    install = (
        f"{PY} -m pip install -q --no-cache-dir --disable-pip-version-check --target .venv/site "
        f"--index-url {registry.index_url} --trusted-host 127.0.0.1 keelprobe"
    )
    return f"set -e; {extra}{install}; echo installed-keelprobe"


@pytest.fixture
def registry(tmp_path: Path) -> Any:
    with Registry(tmp_path / "registry") as served:
        served.add_wheel("keelprobe", "1.0", PROBE)
        yield served


async def test_python_setup_then_tests_pass_then_cache_restores_then_lockfile_reruns(
    db_url: str, tmp_path: Path, registry: Registry
) -> None:
    bare = make_bare_repo(
        tmp_path,
        {
            "tests/test_probe.py": TEST,
            "conftest.py": CONFTEST,
            ".gitignore": ".venv/\n__pycache__/\n",
            "requirements.txt": "keelprobe==1.0\n",
        },
    )
    repositories = {
        "probe": {
            "url": str(bare),
            "setup": pip_setup(registry),
            "maintenance": "test -d .venv/site && echo maintained > .maintained",
            "allow": [f"127.0.0.1:{registry.port}"],
        }
    }
    turns = [{"tool_calls": [{"name": "run_command", "args": {"command": PYTEST}}]}, {"say": "ok"}]
    async with running(tmp_path, db_url, turns, repositories) as keel:
        first = await run_task(keel, "probe")
        [setup] = await evidence(keel, first, "setup")
        assert setup["status"] == "ran" and setup["exit_code"] == 0, setup
        # The sandbox's network namespace is empty: the proxy is its only way to the index.
        assert any(r.path.startswith("/files/keelprobe") for r in registry.requests)
        [tests] = await evidence(keel, first, "test_run")
        assert tests["exit_code"] == 0 and tests["passed"] == 1
        assert first.status is TaskStatus.succeeded
        body = await reply(keel, first)
        assert f"`{SHOWN}` exit 0" in body and "Setup: `set -e;" in body
        page = await task_page(keel, first)
        assert "Setup: <code>" not in page and "Setup: `set -e;" in page
        assert "setup output (last lines)" in page and "installed-keelprobe" in page

        served = len(registry.requests)
        second = await run_task(keel, "probe")
        [setup] = await evidence(keel, second, "setup")
        assert setup["status"] == "restored", setup
        assert setup["maintenance_exit"] == 0, "maintenance runs on the restored environment"
        assert (tmp_path / "ws" / second.task_id / ".maintained").read_text() == "maintained\n"
        assert not (tmp_path / "ws" / first.task_id / ".maintained").exists()
        assert len(registry.requests) == served, "a restored environment fetches nothing"
        [tests] = await evidence(keel, second, "test_run")
        assert tests["exit_code"] == 0
        assert "cached environment restored" in await reply(keel, second)

        commit(bare, tmp_path / "change", {"requirements.txt": "keelprobe>=1.0\n"})
        third = await run_task(keel, "probe")
        [setup] = await evidence(keel, third, "setup")
        assert setup["status"] == "ran" and setup["exit_code"] == 0
        assert len(registry.requests) > served
        assert len(EnvCache(tmp_path / "cache").entries()) == 2


async def test_node_setup_runs_npm_ci_and_the_agent_runs_npm_test(
    db_url: str, tmp_path: Path, registry: Registry
) -> None:
    dep = registry.add_npm("keel-left", "1.0.0", "module.exports = (s) => ' ' + s;\n")
    deps = {"keel-left": (dep.version, dep.resolved, dep.integrity)}
    manifest = npm_manifest("probe", deps) | {
        "scripts": {"test": "node -e \"require('assert').equal(require('keel-left')('x'), ' x')\""}
    }
    bare = make_bare_repo(
        tmp_path,
        {
            "package.json": json.dumps(manifest),
            "package-lock.json": json.dumps(npm_lockfile("probe", deps)),
            ".gitignore": "node_modules/\n",
        },
    )
    repositories = {
        "web": {
            "url": str(bare),
            "setup": "npm ci --no-audit --no-fund",
            "allow": [f"127.0.0.1:{registry.port}"],
        }
    }
    turns = [
        {"tool_calls": [{"name": "run_command", "args": {"command": "npm test"}}]},
        {"say": "ok"},
    ]
    async with running(tmp_path, db_url, turns, repositories) as keel:
        first = await run_task(keel, "web")
        [setup] = await evidence(keel, first, "setup")
        assert setup["status"] == "ran" and setup["exit_code"] == 0, setup
        [tests] = await evidence(keel, first, "test_run")
        assert tests["exit_code"] == 0, tests
        second = await run_task(keel, "web")
        [setup] = await evidence(keel, second, "setup")
        assert setup["status"] == "restored"
        [tests] = await evidence(keel, second, "test_run")
        assert tests["exit_code"] == 0


async def test_egress_setup_reaches_its_registry_only_and_the_agent_nothing(
    db_url: str, tmp_path: Path, registry: Registry
) -> None:
    with Registry(tmp_path / "other") as other:
        fetch = (
            f"{PY} -c \"import urllib.request as u, sys; "
            f"u.urlopen(sys.argv[1], timeout=10)\" "
        )
        probe_other = f"{fetch}{other.url}/simple/ || echo other-unreachable; "
        bare = make_bare_repo(tmp_path, {"tests/test_probe.py": TEST, "conftest.py": CONFTEST,
                                         ".gitignore": ".venv/\n"})
        repositories = {
            "probe": {
                "url": str(bare),
                "setup": pip_setup(registry, extra=probe_other),
                "allow": [f"127.0.0.1:{registry.port}"],
            }
        }
        agent_probe = f"{fetch}{registry.index_url}"
        turns = [
            {"tool_calls": [{"name": "run_command", "args": {"command": agent_probe}}]},
            {"say": "ok"},
        ]
        async with running(tmp_path, db_url, turns, repositories) as keel:
            task = await run_task(keel, "probe")
            [setup] = await evidence(keel, task, "setup")
            [command] = [c for c in await calls(keel, task) if c.name == "run_command"]
        assert other.requests == [], "setup reached a host outside its allowlist"
    assert setup["exit_code"] == 0 and f"127.0.0.1:{other.port}" in setup["refused"]
    assert "other-unreachable" in setup["tail"]
    assert "exit code 1" in str(command.result), "the agent (network off) reached the registry"


async def test_secrets_reach_setup_and_only_agent_ones_reach_commands_and_nothing_is_stored(
    db_url: str, tmp_path: Path, registry: Registry, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    bare = make_bare_repo(tmp_path, {"README.md": "x\n", ".gitignore": ".venv/\n"})
    digest = hashlib.sha256(SETUP_SECRET.encode()).hexdigest()
    check = (
        f'test "$(printf %s "$SETUP_TOKEN" | sha256sum | cut -c1-64)" = {digest} && '
        'echo "setup sees $SETUP_TOKEN"; mkdir -p .venv && echo built > .venv/marker; '
        # As `pip config` or `npm config set` would: a setup-only secret left in the home.
        'mkdir -p ~/.config && echo "index=$SETUP_TOKEN" > ~/.config/pip.conf'
    )
    repositories = {
        "sec": {
            "url": str(bare),
            "setup": check,
            "secrets": {
                "SETUP_TOKEN": SETUP_SECRET,
                "AGENT_TOKEN": {"value": AGENT_SECRET, "agent": True},
            },
        }
    }
    shown = 'echo "[${SETUP_TOKEN:-absent}] [${AGENT_TOKEN:-absent}]"; cat ~/.config/pip.conf'
    turns = [
        {"tool_calls": [{"name": "run_command", "args": {"command": shown}}]},
        {"say": "ok"},
    ]
    async with running(tmp_path, db_url, turns, repositories) as keel:
        task = await run_task(keel, "sec")
        [setup] = await evidence(keel, task, "setup")
        [command] = [c for c in await calls(keel, task) if c.name == "run_command"]
        posts = await keel.db.read(lambda s: outbox.posts_of_task(s, task.task_id))
    assert setup["exit_code"] == 0, "setup did not see its secret"
    assert "setup sees ***" in setup["tail"]
    assert posts and not any(SETUP_SECRET in p.body or AGENT_SECRET in p.body for p in posts)
    posts_text = "\n".join(p.body for p in posts)
    assert "[absent] [***]" in str(command.result), command.result
    assert "index=***" in str(command.result), "a setup-only secret in the home is masked too"
    assert setup["cache"].startswith("not cached: home/.config/pip.conf holds")
    assert "home/.config/pip.conf holds one of the repository's secrets" in posts_text
    left_by_setup = tmp_path / "ws" / ".keel-state" / task.task_id / "home/.config/pip.conf"
    for secret in (SETUP_SECRET, AGENT_SECRET):
        assert rows_containing(db_url, secret) == []
        assert secret not in caplog.text
        for path in [*(tmp_path / "ws").rglob("*"), *(tmp_path / "cache").rglob("*")]:
            if path == left_by_setup:
                continue  # the operator's setup wrote it there; Keel names the file instead
            if path.is_file() and not path.is_symlink():
                assert secret.encode() not in path.read_bytes(), path


@pytest.mark.parametrize(
    ("with_setup", "runs_expected"), [(True, 2), (False, 1)], ids=["with-setup", "worker-only"]
)
async def test_a_worker_killed_during_setup_never_runs_it_twice_and_the_task_completes(
    db_url: str, tmp_path: Path, with_setup: bool, runs_expected: int
) -> None:
    """kill -9 of the worker while setup runs. When the setup's processes die with it (a lost
    machine, a service stopped with its cgroup), the next worker runs setup again, once; when
    they survive, the next worker adopts the running setup and it runs once in all."""
    bare = make_bare_repo(tmp_path, {"README.md": "x\n", ".gitignore": ".runs\n.release\n"})
    # The sandbox sees only the workspace: the count and the release are kept there.
    setup = "echo run >> .runs; while [ ! -e .release ]; do sleep 0.05; done"
    repositories = {"slow": {"url": str(bare), "setup": setup, "network": "off"}}
    script = {"scripts": [{"turns": [{"say": "done"}]}]}
    (tmp_path / "script.yaml").write_text(yaml.safe_dump(script))
    config = {
        "database": {"url": db_url},
        "model": {"provider": "scripted", "script": str(tmp_path / "script.yaml")},
        "workspace": {
            "root": str(tmp_path / "ws"), "sandbox": "bwrap", "repositories": repositories,
        },
        "worker": {"concurrency": 1, "poll_interval_s": 0.05, "lease_seconds": 2},
    }
    (tmp_path / "app.yaml").write_text(yaml.safe_dump(config))
    keel = Keel(build_config(config, env={}))
    await keel.connect()
    task = (
        await keel.scheduler.transact(
            keel.scheduler.schedule, TaskSpec(agent="default", message="go", repo="slow")
        )
    ).task
    worker = subprocess.Popen(
        [
            PY,
            "-c",
            "from adapters.cli import main; main()",
            "worker",
            "--config",
            str(tmp_path / "app.yaml"),
        ],
        start_new_session=True,
        env=os.environ | {"KEEL_DATABASE_URL": ""},
    )
    try:
        ws = tmp_path / "ws" / task.task_id
        for _ in range(600):
            if (ws / ".runs").exists():
                break
            await asyncio.sleep(0.05)
        assert (ws / ".runs").read_text() == "run\n"
        await asyncio.sleep(0.3)
        os.killpg(worker.pid, signal.SIGKILL)  # the worker with everything it started
        if with_setup:
            wrapper_group_kill(tmp_path / "ws")
        worker.wait(timeout=10)
        (ws / ".release").write_text("")
        await keel.start()
        for _ in range(1200):
            current = await keel.scheduler.get(task.task_id)
            if current is not None and current.status.is_terminal:
                break
            await asyncio.sleep(0.05)
        assert current is not None and current.status is TaskStatus.succeeded, current
        assert (ws / ".runs").read_text() == "run\n" * runs_expected
        [detail] = await evidence(keel, current, "setup")
        assert detail["status"] == "ran" and detail["exit_code"] == 0
        assert detail["attempts"] == runs_expected
    finally:
        if worker.poll() is None:
            os.killpg(worker.pid, signal.SIGKILL)
        await keel.stop()


def wrapper_group_kill(root: Path) -> None:
    """Kill every setup wrapper left running under ``root`` (its own session: setsid)."""
    for pid_file in root.glob(".keel-state/*/exec/*/pid"):
        pid = int(pid_file.read_text())
        try:
            os.killpg(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue


async def test_an_allowlisted_agent_reaches_its_hosts_and_the_reply_names_the_refused_ones(
    db_url: str, tmp_path: Path, registry: Registry
) -> None:
    with Registry(tmp_path / "other") as other:
        fetch = f'{PY} -c "import urllib.request as u, sys; u.urlopen(sys.argv[1], timeout=10)"'
        command = (
            f"{fetch} {registry.index_url} && echo allowed-ok; "
            f"{fetch} {other.url}/simple/ || echo other-refused"
        )
        bare = make_bare_repo(tmp_path, {"README.md": "x\n"})
        repositories = {"net": {"url": str(bare), "setup": ""}}
        agents = {"default": {"network": "allowlist", "allow": [f"127.0.0.1:{registry.port}"]}}
        turns = [
            {"tool_calls": [{"name": "run_command", "args": {"command": command}}]},
            {"say": "ok"},
        ]
        async with running(tmp_path, db_url, turns, repositories, agents) as keel:
            task = await run_task(keel, "net")
            [call] = [c for c in await calls(keel, task) if c.name == "run_command"]
            body = await reply(keel, task)
            refused = await evidence(keel, task, "network_refused")
        assert other.requests == []
    output = str(call.result)
    assert "allowed-ok" in output and "other-refused" in output
    assert f"network: refused 127.0.0.1:{other.port}" in output
    assert refused and f"Network: refused 127.0.0.1:{other.port}" in body


async def test_the_repositorys_own_script_runs_without_the_operators_secrets(
    db_url: str, tmp_path: Path
) -> None:
    script = 'echo "token [${SETUP_TOKEN:-absent}] agent [${AGENT_TOKEN:-absent}]"\n'
    bare = make_bare_repo(tmp_path, {".keel/setup.sh": script})
    repositories = {
        "own": {
            "url": str(bare),
            "secrets": {
                "SETUP_TOKEN": SETUP_SECRET,
                "AGENT_TOKEN": {"value": AGENT_SECRET, "agent": True},
            },
        }
    }
    async with running(tmp_path, db_url, [{"say": "ok"}], repositories) as keel:
        task = await run_task(keel, "own")
        [setup] = await evidence(keel, task, "setup")
    assert setup["source"] == "repository" and setup["command"] == "bash .keel/setup.sh"
    assert setup["exit_code"] == 0 and "token [absent] agent [absent]" in setup["tail"]


async def test_a_task_cannot_change_the_cached_environment_for_later_tasks(
    db_url: str, tmp_path: Path
) -> None:
    """A restored environment's files are hard links to the cache's; a task's command can
    neither write them nor make them writable, so the next task gets what setup made."""
    bare = make_bare_repo(tmp_path, {".gitignore": ".venv/\n"})
    setup = "mkdir -p .venv/bin && echo GOOD > .venv/bin/tool"
    tamper = (
        "chmod u+w .venv/bin/tool; printf EVIL > .venv/bin/tool; "
        "chmod a-w .venv/bin/tool; cat .venv/bin/tool"
    )
    repositories = {"env": {"url": str(bare), "setup": setup, "network": "off"}}
    turns = [
        {"tool_calls": [{"name": "run_command", "args": {"command": tamper}}]},
        {"say": "ok"},
    ]
    async with running(tmp_path, db_url, turns, repositories) as keel:
        first = await run_task(keel, "env")
        second = await run_task(keel, "env")
        [restored] = await evidence(keel, second, "setup")
        [call] = [c for c in await calls(keel, second) if c.name == "run_command"]
        third = await run_task(keel, "env")
        [again] = await evidence(keel, third, "setup")
    output = str((call.result or {}).get("output"))
    assert restored["status"] == "restored" and "Operation not permitted" in output
    assert "---\nGOOD\n" in output, "the command read what setup made"
    assert again["status"] == "restored", "the entry is intact and still restored"
    # The first task's files are its own (the cache took a copy); the others' are linked.
    assert (tmp_path / "ws" / first.task_id / ".venv/bin/tool").read_text() == "EVIL"
    for task in (second, third):
        assert (tmp_path / "ws" / task.task_id / ".venv/bin/tool").read_text() == "GOOD\n"


async def test_an_environment_that_cannot_be_stored_leaves_the_task_going(
    db_url: str, tmp_path: Path
) -> None:
    """The repository's script makes a home too deep for ``cp``: the entry is not stored, the
    reason says why, and the task still runs to its answer."""
    name = "d" * 60  # 120 levels of it: past PATH_MAX
    deep = f"cd ~ && for i in $(seq 120); do mkdir {name} && cd {name} || exit 1; done\n"
    bare = make_bare_repo(tmp_path, {".keel/setup.sh": deep})
    repositories = {"deep": {"url": str(bare), "network": "off"}}
    async with running(tmp_path, db_url, [{"say": "ok"}], repositories) as keel:
        task = await run_task(keel, "deep")
        [setup] = await evidence(keel, task, "setup")
    assert task.status is TaskStatus.succeeded, task.result
    assert setup["exit_code"] == 0 and setup["cache"].startswith("not cached"), setup
