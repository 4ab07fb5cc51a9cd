"""SIGKILL a real worker at every boundary of a task that submits a pull request review, the
kill right after the review's POST (``started:``) always among them, restart it, and check
GitHub (the emulator, which outlives the worker): never two reviews; where the review landed,
the call settled with the review read back (its marker found it again), with its one inline
comment on the diff; where it did not, the call is reported interrupted, not repeated."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from adapters.emulators.github import create_github_app
from adapters.emulators.github_state import GitHubState, PullFile
from adapters.emulators.server import serve
from runtime.scheduler import Scheduler
from runtime.store import ledger, tool_calls
from runtime.store.engine import Database
from tests.factories import make_spec
from tests.recovery.restarts import points_reached, problems_at, sampled, spawn, until_done
from tests.recovery.review_main import BOT, REPO, TOKEN

PATCH = "@@ -1,2 +1,3 @@\n a = 1\n-b = 2\n+b = 3\n+c = 4\n"
REVIEW = {
    "number": 1,
    "event": "COMMENT",
    "body": "One question.",
    "comments": [{"path": "app.py", "line": 3, "body": "why c?"}],
}
SCRIPT = {
    "scripts": [
        {
            "turns": [
                {"tool_calls": [{"name": "submit_review", "args": REVIEW}]},
                {"say": "reviewed"},
            ]
        }
    ]
}
AFTER_POST = "started:call_0_0#1"
PARALLEL = 2


def _github() -> GitHubState:
    state = GitHubState()
    state.add_token(TOKEN, BOT)
    state.add_repo(REPO)
    files = (PullFile("app.py", "modified", 2, 1, PATCH),)
    state.add_pull(REPO, "Change b", user="alice", head="feature", files=files)
    return state


async def _run(db_url: str, folder: Path, fault: str | None, trace: Path | None) -> list[str]:
    """One task through kills against a fresh emulator; the problems found at its end."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "script.json").write_text(json.dumps(SCRIPT))
    state = _github()
    db = Database.from_url(db_url)
    try:
        with serve(create_github_app(state)) as server:
            scheduler = Scheduler(db)
            task_id = (await scheduler.transact(scheduler.schedule, make_spec())).task.task_id
            env = {"KEEL_FAULT": fault} if fault else {}
            if trace is not None:
                env["KEEL_FAULT_TRACE"] = str(trace)
            start = _starter(db_url, folder, server.url)
            await until_done(db, task_id, start, env, folder=folder, timeout=120)
        return await _problems(db, task_id, state)
    finally:
        db.close()


def _starter(
    db_url: str, folder: Path, url: str
) -> Callable[[dict[str, str]], subprocess.Popen[bytes]]:
    args = (db_url, str(folder), str(folder / "script.json"), url)

    def start(env: dict[str, str]) -> subprocess.Popen[bytes]:
        return spawn("tests.recovery.review_main", args, folder, env)

    return start


async def _problems(db: Database, task_id: str, state: GitHubState) -> list[str]:
    def read(session: Any) -> tuple[list[Any], list[Any]]:
        return ledger.evidence_of_tree(session, task_id), tool_calls.all_calls(session, task_id)

    evidence, calls = await db.read(read)
    reviews = state.reviews_of(REPO, 1)
    read_back = [e for e in evidence if e.item.kind == "read_back"]
    problems = []
    if len(reviews) > 1:
        problems.append(f"{len(reviews)} reviews posted")
    if reviews:
        comments = [c for c in state.repos[REPO].review_comments.values()]
        if [(c.path, c.line, c.review_id) for c in comments] != [
            ("app.py", 3, reviews[0].review_id)
        ]:
            problems.append(f"inline comments {comments}")
        if len(read_back) != 1 or read_back[0].item.detail["review_id"] != reviews[0].review_id:
            problems.append(f"posted, but read back as {read_back}")
    elif not any(c.outcome == "interrupted" for c in calls):
        problems.append(f"no review, and the call was not reported interrupted: {calls}")
    return problems


async def test_one_review_at_every_kill_point_of_its_submission(
    db_factory: Callable[[], str], tmp_path: Path
) -> None:
    trace = tmp_path / "trace.txt"
    assert await _run(db_factory(), tmp_path / "baseline", None, trace) == []
    points = points_reached(trace)
    assert AFTER_POST in points, points
    points = list(dict.fromkeys([AFTER_POST, *sampled(points)]))
    urls = [db_factory() for _ in points]

    async def one(index: int, point: str) -> list[str]:
        found = await _run(urls[index], tmp_path / f"kill{index}", point, None)
        return [f"{point}: {p}" for p in found]

    assert await problems_at(points, one, PARALLEL) == []
