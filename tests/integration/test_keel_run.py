"""``keel run`` as a real subprocess: a temp git repository with a failing test, the real
sandbox and tools, the scripted model or an OpenAI-compatible stand-in on loopback; Ctrl-C."""

from __future__ import annotations

import json
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Mapping
from contextlib import closing
from pathlib import Path

import yaml

from tests.integration.test_cli import KEEL, _env
from tests.integration.test_openai_provider import CompletionsServer, completion, running_server

__all__ = ["running_server"]  # the stand-in's fixture, shared

PYTEST = f"{sys.executable} -m pytest -q -p no:cacheprovider"
SHOWN = "python -m pytest -q -p no:cacheprovider"  # as evidence names it: no host path
FIXED = "def add(a, b):\n    return a + b\n"


def _repo(root: Path) -> Path:
    repo = root / "shop"
    repo.mkdir()
    (repo / "calc.py").write_text("def add(a, b):\n    return a - b\n")
    (repo / "test_calc.py").write_text("from calc import add\n\n\ndef test_add():\n"
                                       "    assert add(2, 3) == 5\n")
    for args in (["init", "-q", "-b", "main"], ["add", "."],
                 ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "add()"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    return repo


def _config(root: Path, model: Mapping[str, object]) -> Path:
    path = root / "app.yaml"
    path.write_text(yaml.safe_dump({
        "model": dict(model),
        "workspace": {"root": str(root / "workspaces"), "sandbox": "bwrap"},
        "worker": {"poll_interval_s": 0.1},
    }))
    return path


def _script(root: Path, turns: list[dict[str, object]]) -> dict[str, object]:
    script = root / "script.yaml"
    script.write_text(yaml.safe_dump({"scripts": [{"match": "(?i)fix", "turns": turns}]}))
    return {"provider": "scripted", "script": str(script)}


def _run(root: Path, config: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    args = ["run", "fix the failing test", "--repo", str(root / "shop"), "--config", str(config)]
    return subprocess.run([*KEEL, *args, *extra], env=_env(None), cwd=root,
                          capture_output=True, text=True, timeout=120)


def _call(name: str, **args: object) -> dict[str, object]:
    return {"name": name, "args": args}


FIX_TURNS: list[dict[str, object]] = [
    {
        "expect_seen": ["Came from: the terminal (keel run)"],  # the brief says so
        "say": "Reproducing the failure.",
        "tool_calls": [_call("run_command", command=PYTEST)],
    },
    {
        "expect_seen": ["1 failed"],
        "tool_calls": [_call("write_file", path="calc.py", content=FIXED)],
    },
    {"tool_calls": [_call("run_command", command=PYTEST)]},
    {"expect_seen": ["1 passed"], "tool_calls": [_call("git_commit", message="Fix add()")]},
    {"say": "Fixed: add() subtracted; the test passes."},
]


def _assert_fixed(done: subprocess.CompletedProcess[str], root: Path) -> None:
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert "you: fix the failing test" in out and "keel: ⏳" in out
    assert "  · tool run_command: ok" in out and "  · tool git_commit: ok" in out
    reply = out[out.index("Fixed: add() subtracted"):]
    assert f"`{SHOWN}` exit 1, 1 failed" in reply and f"`{SHOWN}` exit 0, 1 passed" in reply
    assert "Commit " in reply and out.rstrip().endswith("succeeded")
    assert out.count("Fixed: add() subtracted") == 1  # the reply printed once
    assert "return a - b" in (root / "shop" / "calc.py").read_text()  # the original is as it was
    checkout = out.split("the task's checkout (what it changed and committed): ")[1].split()[0]
    assert (Path(checkout) / "calc.py").read_text() == FIXED


def test_run_fixes_failing_test_with_scripted_model_and_prints_reply_with_evidence(
    tmp_path: Path,
) -> None:
    _repo(tmp_path)
    database = tmp_path / "keel.db"
    config = _config(tmp_path, _script(tmp_path, FIX_TURNS))
    done = _run(tmp_path, config, "--database-url", f"sqlite:///{database}")
    _assert_fixed(done, tmp_path)
    # The terminal is a thread of its own kind, stored as such: not a Slack thread.
    with closing(sqlite3.connect(database)) as db:
        (origin,) = db.execute("SELECT origin_thread_ref FROM tasks").fetchone()
        posts = db.execute("SELECT surface, thread_ref, landed_on FROM outbox").fetchall()
    assert origin.startswith("local:")
    assert posts and all(
        surface == "local" and thread == origin and landed.startswith(f"{origin}:")
        for surface, thread, landed in posts
    ), posts


def _tool_reply(call_id: str, name: str, **args: object) -> dict[str, object]:
    call = {"id": call_id, "type": "function",
            "function": {"name": name, "arguments": json.dumps(args)}}
    return {"content": None, "tool_calls": [call]}


def test_run_works_the_same_with_openai_compatible_stand_in(
    tmp_path: Path, running_server: CompletionsServer
) -> None:
    running_server.reset()
    running_server.queue(
        completion({"content": "Reproducing the failure.",
                    "tool_calls": _tool_reply("c1", "run_command", command=PYTEST)["tool_calls"]}),
        completion(_tool_reply("c2", "write_file", path="calc.py", content=FIXED)),
        completion(_tool_reply("c3", "run_command", command=PYTEST)),
        completion(_tool_reply("c4", "git_commit", message="Fix add()")),
        completion({"content": "Fixed: add() subtracted; the test passes."}),
    )
    model = {"provider": "openai", "base_url": running_server.base_url, "api_key": "sk-local",
             "model": "gpt-4o-mini"}
    _repo(tmp_path)
    done = _run(tmp_path, _config(tmp_path, model))
    _assert_fixed(done, tmp_path)
    assert not running_server.replies
    second = running_server.received[1].json()  # the model saw the failing run
    assert "1 failed" in json.dumps(second["messages"])


def test_ctrl_c_stops_the_task_and_says_so(tmp_path: Path) -> None:
    _repo(tmp_path)
    turns: list[dict[str, object]] = [
        {"say": "Looking.", "tool_calls": [_call("run_command", command="sleep 60")]},
        {"say": "unreachable"},
    ]
    config = _config(tmp_path, _script(tmp_path, turns))
    args = ["run", "fix the failing test", "--repo", str(tmp_path / "shop"),
            "--config", str(config)]
    with subprocess.Popen([*KEEL, *args], env=_env(None), cwd=tmp_path, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE) as keel:
        assert keel.stdout is not None
        lines: list[str] = []
        deadline = time.monotonic() + 60
        while not any("phase await_tools" in line for line in lines):
            assert time.monotonic() < deadline, "".join(lines)
            lines.append(keel.stdout.readline())
        time.sleep(0.5)  # the command is running in the sandbox
        started = time.monotonic()
        keel.send_signal(signal.SIGINT)
        out, err = keel.communicate(timeout=60)
    out = "".join(lines) + out
    assert keel.returncode == 3, out + err
    assert "stopping the task (Ctrl-C)" in out
    assert "was canceled with Ctrl-C" in out.splitlines()[-1]
    assert "keel: " in out and "unreachable" not in out
    assert time.monotonic() - started < 30  # not the command's 60 s


def test_bad_request_exits_2_with_the_reason_and_runs_nothing(tmp_path: Path) -> None:
    _repo(tmp_path)
    config = _config(tmp_path, _script(tmp_path, FIX_TURNS))
    ghost = _run(tmp_path, config, "--agent", "ghost")
    assert ghost.returncode == 2 and "unknown agent 'ghost'" in ghost.stderr
    (tmp_path / "shop").rename(tmp_path / "gone")
    missing = _run(tmp_path, config)
    assert missing.returncode == 2 and "no such folder" in missing.stderr
    assert not (tmp_path / "workspaces").exists()


def test_a_folders_git_config_runs_nothing_and_alike_names_stay_apart(tmp_path: Path) -> None:
    """The folder may be a task's own checkout, whose .git a sandboxed command wrote: Keel's
    look at it runs no fsmonitor and no hook. Two folders (or URLs) ending alike get names of
    their own, so they never share an environment cache entry."""
    from adapters.local_run import repository

    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    repo = _repo(tmp_path / "a")
    planted = tmp_path / "planted"
    for key in ("core.fsmonitor", "core.hooksPath"):
        value = f"touch {planted}; false" if key == "core.fsmonitor" else str(tmp_path)
        subprocess.run(["git", "config", key, value], cwd=repo, check=True)
    (tmp_path / "post-checkout").write_text(f"#!/bin/sh\ntouch {planted}\n")
    (repo / "calc.py").write_text("changed, not committed\n")

    found = repository(str(repo))
    twin = repository(str(_repo(tmp_path / "b")))

    assert not planted.exists()
    assert found.note is not None and "uncommitted changes stay out" in found.note
    assert found.key.startswith("local/shop-") and twin.key.startswith("local/shop-")
    assert found.key != twin.key
    assert repository(str(repo)).key == found.key  # stable for the same folder
